import sys

from .cli import main

# guarded: a worker process started by the spawn method or by mpi4py.futures may import this module
if __name__ == "__main__":
    sys.exit(main())
