"""reduce_batch: record a failing PyTorch batch for `reduce`, read it back, and replay and test it.

The recorder (fileformat: the format and save; record: record_on_failure) is what `reduce
recorder` prints as one file; reader reads a file back (load); the hooks, the pytest plugin and the
replay runtime are the package's other modules (docs/ARCHITECTURE.md, "The Python side")."""

from .fileformat import (
    DTYPES,
    FORMAT_VERSION,
    MAX_DEPTH,
    BatchFileError,
    Flattener,
    State,
    __version__,
    encode_manifest,
    rng_state,
    runs_at_import,
    save,
    saved_offset,
    step_entry,
    torch_module,
    trust_dir,
    type_path,
    warn,
)
from .reader import Batch, load, read_manifest, read_raw
from .record import Window, __getattr__, copied, record_on_failure

# The user's API, and what the hooks and the runtime use (the vendored recorder has the same names).
__all__ = [
    "DTYPES",
    "FORMAT_VERSION",
    "MAX_DEPTH",
    "Batch",
    "BatchFileError",
    "Flattener",
    "State",
    "Window",
    "__getattr__",
    "__version__",
    "copied",
    "encode_manifest",
    "load",
    "read_manifest",
    "read_raw",
    "record_on_failure",
    "rng_state",
    "runs_at_import",
    "save",
    "saved_offset",
    "step_entry",
    "torch_module",
    "trust_dir",
    "type_path",
    "warn",
]
