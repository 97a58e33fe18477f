"""Runs a test module's `test_*` functions without pytest: `sys.exit(run(globals()))`.

Prints one line per test and "N passed, N failed"; returns 1 if any failed.
"""


def run(namespace):
    tests = [(name, fn) for name, fn in sorted(namespace.items()) if name.startswith("test_")]
    failed = 0
    for name, fn in tests:
        try:
            fn()
            print(f"ok   {name}")
        except Exception as e:  # noqa: BLE001 - report every failure and go on
            failed += 1
            print(f"FAIL {name}: {type(e).__name__}: {e}")
    print(f"{len(tests) - failed} passed, {failed} failed")
    return 1 if failed else 0
