"""What the h5py-driven checks of the linattn binary share
(data_outside_the_file.py, unwritten_datasets.py, gates_in_files.py): h5py and
numpy or a skip (exit 77), the binary and work folder from the command line,
the linattn runner, and the failure list with the closing verdict."""
import os
import subprocess
import sys


def import_h5py_or_skip():
    """(h5py, numpy); exit 77 (CTest's skip) when either cannot be imported."""
    try:
        import h5py
        import numpy as np
    except ImportError as e:
        print(f"SKIPPED: {sys.executable} cannot import h5py/numpy ({e}); install python3-h5py python3-numpy")
        sys.exit(77)
    return h5py, np


class CliCheck:
    """argv: SCRIPT LINATTN_EXE WORKDIR."""

    def __init__(self, argv):
        self.exe, self.work = os.path.abspath(argv[1]), os.path.abspath(argv[2])
        self.failures = []

    def fail(self, what):
        print("FAIL:", what)
        self.failures.append(what)

    def linattn(self, *args):
        """(exit code, stdout, stderr) of linattn ARGS run in the work folder."""
        r = subprocess.run([self.exe, *args], capture_output=True, text=True, cwd=self.work)
        return r.returncode, r.stdout, r.stderr

    def finish(self, ok_message):
        if self.failures:
            print(f"\n{len(self.failures)} failure(s)")
            sys.exit(1)
        print("\nok: " + ok_message)
