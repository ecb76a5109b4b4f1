#!/usr/bin/env python3
"""Whether two linattn output files hold the same bits in every dataset they
share (o, h, final_state, z_state, cu_seqlens); attributes such as timings
are ignored. Exit 0 when identical, 1 otherwise.

    python3 bench/same_bits.py A.h5 B.h5
"""
import sys

import h5py
import numpy as np


def same(a, b, name):
    da, db = a[name], b[name]
    if da.shape != db.shape or da.id.get_type().get_size() != db.id.get_type().get_size():
        return False
    size = da.id.get_type().get_size()
    buf_a = np.empty(da.shape, dtype=f"u{size}")
    buf_b = np.empty(db.shape, dtype=f"u{size}")
    # Read with the file's own type as memory type: no conversion, the bits as stored.
    da.id.read(h5py.h5s.ALL, h5py.h5s.ALL, buf_a, mtype=da.id.get_type())
    db.id.read(h5py.h5s.ALL, h5py.h5s.ALL, buf_b, mtype=db.id.get_type())
    return np.array_equal(buf_a, buf_b)


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    with h5py.File(sys.argv[1], "r") as a, h5py.File(sys.argv[2], "r") as b:
        names = [n for n in ("o", "h", "final_state", "z_state", "cu_seqlens") if n in a or n in b]
        ok = True
        for n in names:
            s = n in a and n in b and same(a, b, n)
            ok &= s
            print(f"{n}: {'same bits' if s else 'DIFFERENT'}")
    print("identical" if ok else "different")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
