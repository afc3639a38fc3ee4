"""A child that runs past one resource limit: file size, CPU time or memory."""

import os
import sys

from jobs.runtime.process import child as childside


def write_file():
    with open(sys.argv[2], "wb") as file:
        for _ in range(64):
            file.write(b"x" * 65536)
            file.flush()


def spin():
    while True:
        pass


def allocate():
    # Fits in this machine's memory, not in the 512 MiB address-space limit.
    bytearray(1 << 30)


def main():
    {"file": write_file, "cpu": spin, "memory": allocate}[sys.argv[1]]()
    # Reaching here means the limit did not bite.
    os._exit(3)


childside.run(main)
