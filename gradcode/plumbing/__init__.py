"""Plumbing: what every layer above leans on and that knows nothing of gradient descent.

The registry of named parts (:mod:`.registry`, with :mod:`.params` for their parameter checks), results folders
and their locks (:mod:`.outdir`), child processes that die with their parent (:mod:`.children`), the machine's
memory (:mod:`.memory`), the fingerprint of the code that produced a result (:mod:`.fingerprint`), progress bars
(:mod:`.progress`) and user data files (:mod:`.datafile`).
Nothing here imports from another layer of gradcode except :mod:`gradcode.errors`.
"""

VERSION = "0.1.0"   # gradcode's version (``gradcode.__version__``; pyproject.toml says the same)
