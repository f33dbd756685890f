# TEST DOUBLE (tests/unit/test_check_mode_apt.py): hides python3-debian (debian.deb822) too.
raise ImportError("python3-debian is hidden by tests/check_mode/hide-python-apt")
