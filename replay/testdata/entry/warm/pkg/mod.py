"""python -m pkg.mod {batch}: prints what it sees, and raises IndexError with "index" in argv."""

import json
import os
import sys

run_dir = os.environ.get("REDUCE_RUN_DIR", "")
print(json.dumps({"argv": [a.replace(run_dir, "{rundir}") for a in sys.argv], "path0": sys.path[0],
                  "name": __name__, "spec": __spec__.name}))
if "index" in sys.argv:
    raise IndexError("Target 4 is out of bounds.")
