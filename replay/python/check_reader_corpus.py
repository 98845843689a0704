"""Read batch files with reduce_batch.load, for the Go test that holds the two readers to one answer
(fixtures/agree_test.go).

    check_reader_corpus.py FILE[@MAX_SIZE] ...

One JSON line per file, in order: {"file": FILE, "ok": true}; {"file": FILE, "field": F, "message": M} for a
BatchFileError (M the message without the file's name, F its field: M up to the first ": "); or {"file": FILE,
"odd": "ExceptionClass: text"} for any other exception, which is a bug of the reader.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import reduce_batch as rb  # noqa: E402


def check(arg):
    path, _, size = arg.rpartition("@") if "@" in arg else (arg, "", "")
    try:
        rb.load(path, **({"max_size": int(size)} if size else {}))
    except rb.BatchFileError as e:
        msg = str(e)
        msg = msg[len(path) + 2:] if msg.startswith(path + ": ") else msg
        return {"file": path, "field": msg.split(": ", 1)[0], "message": msg}
    except BaseException as e:  # noqa: BLE001  (what the reader must never raise)
        return {"file": path, "odd": f"{type(e).__name__}: {e}"[:500]}
    return {"file": path, "ok": True}


if __name__ == "__main__":
    for a in sys.argv[1:]:
        print(json.dumps(check(a)), flush=True)
