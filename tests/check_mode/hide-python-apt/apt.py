# TEST DOUBLE (tests/unit/test_check_mode_apt.py): first on PYTHONPATH, it hides python3-apt from every interpreter
# the apt module tries (this one, and /usr/bin/python3 and /usr/bin/python, which it probes with the same
# PYTHONPATH), as on a host without the package.
raise ImportError("python3-apt is hidden by tests/check_mode/hide-python-apt")
