"""The torch backend's worker as reduce's launcher (replay.WorkerModule) runs it, with the package's
folder (replay/python) where reduce puts its zip."""

import os
import sys

_here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if sys.path and sys.path[0] and os.path.realpath(sys.path[0]) == os.path.dirname(os.path.realpath(__file__)):
    sys.path[0] = _here
else:
    sys.path.insert(0, _here)

if __name__ == "__main__":  # not when a spawned child imports this file as __mp_main__
    from reduce_batch.worker import main

    sys.exit(main())
