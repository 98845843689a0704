package regress

import (
	"errors"
	"io"
	"os"
	"syscall"
)

// No symbolic link under --out is followed, nor in a fixture's directory:
// a fixture directory from someone else, or a repository, can carry a
// link named as a file reduce writes (.reduce.lock, a journal, a fixture's
// directory or a file in it, conftest.py) that names a file outside, which
// reduce would write over. --out itself, as the user gave it, is followed.
// Every file reduce opens there is opened by OpenNoFollow (the reduction's
// lock and journal too); a directory is checked by NoLink before reduce
// reads or writes in it; what is replaced is replaced by a rename, which
// replaces a link and never writes through it.

// ErrLink is the error of a symbolic link where reduce writes, or reads
// back what it wrote: bad usage of --out, never followed.
var ErrLink = errors.New("a symbolic link")

// linkError is a link at path, refused.
type linkError struct{ path string }

func (e *linkError) Error() string {
	return e.path + " is a symbolic link: reduce never follows a link under --out; remove it"
}

func (e *linkError) Is(target error) bool { return target == ErrLink }

// OpenNoFollow is os.OpenFile(path, flag, perm) but for a symbolic link
// at path (its last element), which is never opened: an error wrapping
// ErrLink that names path. The directories above path are the caller's
// to check (NoLink).
func OpenNoFollow(path string, flag int, perm os.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, flag|syscall.O_NOFOLLOW, perm)
	// O_NOFOLLOW makes a link ELOOP, or EEXIST with O_CREATE|O_EXCL.
	if err != nil && (errors.Is(err, syscall.ELOOP) || errors.Is(err, os.ErrExist)) {
		if lerr := NoLink(path); lerr != nil {
			return nil, lerr
		}
	}
	return f, err
}

// NoLink is an error wrapping ErrLink when path is a symbolic link; nil
// when it is anything else, or nothing.
func NoLink(path string) error {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		return &linkError{path: path}
	}
	return nil
}

// readNoFollow is os.ReadFile but for a symbolic link, refused (OpenNoFollow).
func readNoFollow(path string) ([]byte, error) {
	f, err := OpenNoFollow(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}
