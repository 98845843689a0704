// Package trust decides what a batch file or a fixture directory may run
// without the user saying so: a recording, not a place.
//
// A file names code: a recorded step (module and function), the class a
// framework hook rebuilds, the interpreter that recorded it; a fixture also
// its --entry function and its command. A batch file is the user's, and
// runs what it names, when its bytes are in the user's store (Of): the
// recorder put them there when it wrote the file on this machine
// (reduce_batch.py's _sign), reduce when it converted one of the user's
// (Carry), `reduce trust` when the user read what a file from elsewhere
// runs and allowed it. A file of a fixture directory is the user's when its
// bytes are in the store (reduce wrote the fixture from a batch of theirs)
// or when it is committed, with these bytes, at HEAD of the git repository
// pytest or reduce runs in (Check, Committed): the fixtures a repository
// commits run in its CI, where pytest runs the repository's conftest.py
// anyway. A commit is no proof for a batch file: a directory from elsewhere
// may carry a .git of its own, and a colleague's file committed in the
// user's repository is a file from someone else.
//
// Anything else (a file from an issue, a colleague, a CI artifact, a
// directory unpacked into the repository) runs nothing it names, and
// reduce's own functions are never a step (OwnStep). The store is a
// directory of entries named by the file's SHA-256, as Jupyter keeps the
// signatures of the notebooks a user ran: a signature inside the file
// would mean writing into the user's input (a file allowed by `reduce
// trust`) or another format version, and a digest in a directory only the
// user writes proves the same thing.
//
// Python's side of the same rule is reduce_collect.py's Trust, trusted,
// stored and committed, with reduce_batch.py's trust_dir and _sign;
// regress.TestTrustAgrees checks that the two find the same store, read
// each other's entries and decide alike.
//
// It imports nothing of this module, and runs one program: git, read-only.
package trust
