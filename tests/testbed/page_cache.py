"""The page cache of a simulated host, for the scenarios' tests: a test that must not depend on what the machine's
memory pressure left cached decides it itself.

    from page_cache import EVICT
    docker exec HOST python3 -c "$EVICT" DIR      (or host.check_output(f"python3 -c {shlex.quote(EVICT)} DIR"))
"""

# Run by the host's python3 with a directory as its argument: drops every file's pages under it (posix_fadvise
# DONTNEED), links followed (a Hugging Face snapshot's shards are links into blobs/). tests/conftest.py's
# evict_from_page_cache does the same for files of this machine.
EVICT = (
    "import os, sys\n"
    "for top, _, files in os.walk(sys.argv[1], followlinks=True):\n"
    "    for name in files:\n"
    "        fd = os.open(os.path.join(top, name), os.O_RDONLY)\n"
    "        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)\n"
    "        os.close(fd)\n"
)
