package trust

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Kinds of store entry: who said the file is the user's.
const (
	// KindRecording: the recorder wrote it (reduce_batch.py's save).
	KindRecording = "recording"
	// KindFixture: reduce wrote it into a fixture, from a batch that was
	// the user's or named nothing to run.
	KindFixture = "fixture"
	// KindAllowed: the user allowed it with `reduce trust`, having been
	// shown what it runs.
	KindAllowed = "allowed"
)

// StoreEnv names the store's directory where it is set; else
// $XDG_DATA_HOME/reduce/trusted, else ~/.local/share/reduce/trusted.
const StoreEnv = "REDUCE_TRUST_DIR"

// Store is the user's record of the files that are theirs: one entry per
// file, named by the SHA-256 of its bytes. Only the user writes it (its
// directory is made 0700); an entry is written whole or not at all.
type Store struct {
	Dir string
}

// Entry is what the store keeps of a file: who said it is the user's,
// where it was then and when, and what it runs (for the user who reads
// the store).
type Entry struct {
	Digest string   `json:"digest"`
	Kind   string   `json:"kind"`
	Path   string   `json:"path,omitempty"`
	Time   string   `json:"time,omitempty"`
	Runs   []string `json:"runs,omitempty"`
}

// ErrNoHome is DefaultStore's error where no absolute path names the store:
// the variables unset or relative, and no HOME.
var ErrNoHome = errors.New("no trust store: set " + StoreEnv + " (or HOME) to an absolute path")

// DefaultStore is the store the recorder and reduce share on this machine:
// $REDUCE_TRUST_DIR, else $XDG_DATA_HOME/reduce/trusted, else
// $HOME/.local/share/reduce/trusted, each only as an absolute path (one
// relative to a process's working directory would be another store in
// another process). reduce_batch.py's trust_dir makes the same choice.
func DefaultStore() (Store, error) {
	if d := os.Getenv(StoreEnv); d != "" {
		if !filepath.IsAbs(d) {
			return Store{}, ErrNoHome
		}
		return Store{Dir: d}, nil
	}
	if d := os.Getenv("XDG_DATA_HOME"); filepath.IsAbs(d) {
		return Store{Dir: filepath.Join(d, "reduce", "trusted")}, nil
	}
	if home := os.Getenv("HOME"); filepath.IsAbs(home) {
		return Store{Dir: filepath.Join(home, ".local", "share", "reduce", "trusted")}, nil
	}
	return Store{}, ErrNoHome
}

var digestRe = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// RecordFile is a fixture's record (regress.RecordFile), whose status the
// user changes (by hand, or with `reduce fixed`): the status decides
// nothing that runs, so a record's digest is taken as if it were open
// (openStatus), and marking a fixture fixed keeps it the user's.
const RecordFile = "fixture.json"

// maxRecord bounds a record read whole for its digest.
const maxRecord = 64 << 20

var fixedStatus = regexp.MustCompile(`"status"[ \t\n\r]*:[ \t\n\r]*"fixed"`) // JSON's white space

// openStatus is a record's bytes with its first "status": "fixed" read as
// "status": "open" (reduce_collect.py's _open_status).
func openStatus(data []byte) []byte {
	loc := fixedStatus.FindIndex(data)
	if loc == nil {
		return data
	}
	return slices.Concat(data[:loc[0]], []byte(`"status": "open"`), data[loc[1]:])
}

// RecordDigest is the digest of a fixture's record of these bytes: their
// SHA-256 with the status open (RecordFile).
func RecordDigest(data []byte) string {
	h := sha256.Sum256(openStatus(data))
	return "sha256:" + hex.EncodeToString(h[:])
}

// Digest is the SHA-256 of the file's bytes, as "sha256:<hex>"; of a
// fixture's record, of its bytes with its status open (RecordFile).
func Digest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if filepath.Base(path) == RecordFile {
		data, err := io.ReadAll(io.LimitReader(f, maxRecord+1))
		if err != nil {
			return "", fmt.Errorf("read %s: %w", path, err)
		}
		if len(data) > maxRecord {
			return "", fmt.Errorf("read %s: over %d bytes: no fixture record", path, maxRecord)
		}
		h.Write(openStatus(data))
	} else if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

func (s Store) path(digest string) (string, error) {
	if !digestRe.MatchString(digest) {
		return "", fmt.Errorf("trust: %q is no sha256:<hex> digest", digest)
	}
	return filepath.Join(s.Dir, strings.TrimPrefix(digest, "sha256:")+".json"), nil
}

// Lookup returns the store's entry for digest, if it has one. An entry
// that is a link, not a regular file, or not the JSON of that digest is
// none.
func (s Store) Lookup(digest string) (Entry, bool) {
	p, err := s.path(digest)
	if err != nil {
		return Entry{}, false
	}
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return Entry{}, false
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return Entry{}, false
	}
	var e Entry
	if err := json.NewDecoder(io.LimitReader(f, 1<<20)).Decode(&e); err != nil || e.Digest != digest {
		return Entry{}, false
	}
	return e, true
}

// Add records the file of digest as the user's, with e's kind and what
// it runs; an entry already there is replaced.
func (s Store) Add(digest string, e Entry) error {
	p, err := s.path(digest)
	if err != nil {
		return err
	}
	e.Digest = digest
	if e.Time == "" {
		e.Time = time.Now().UTC().Format(time.RFC3339)
	}
	data, err := json.MarshalIndent(e, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return fmt.Errorf("trust store %s: %w", s.Dir, err)
	}
	tmp, err := os.CreateTemp(s.Dir, ".entry-*")
	if err != nil {
		return fmt.Errorf("trust store %s: %w", s.Dir, err)
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	_, err = tmp.Write(append(data, '\n'))
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), p)
	}
	if err != nil {
		return fmt.Errorf("trust store %s: %w", s.Dir, err)
	}
	return nil
}

// Remove forgets the file of digest; it reports whether there was an
// entry.
func (s Store) Remove(digest string) (bool, error) {
	p, err := s.path(digest)
	if err != nil {
		return false, err
	}
	err = os.Remove(p)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// Verdict is whether a file may run what it names, and how that was
// decided, in words for a person.
type Verdict struct {
	Mine bool
	// How: "written by your recorder", "committed in REPO", ... where Mine;
	// else why not.
	How    string
	Digest string
}

// Check decides for a file of a fixture directory, whose digest is digest
// ("" to have it computed): the store first, then git at root (the
// directory pytest or reduce runs in): the fixtures a repository commits
// run in its CI. An error is the file's (it cannot be read); a store or git
// that cannot say is a verdict of not mine, with why. A batch file is
// decided by Of: the store alone.
func Check(path, digest, root string) (Verdict, error) {
	if digest == "" {
		var err error
		if digest, err = Digest(path); err != nil {
			return Verdict{}, err
		}
	}
	v := Of(digest, []string{path})
	if v.Mine {
		return v, nil
	}
	repo, ok, why := Committed(root, path, digest)
	if ok {
		v.Mine, v.How = true, "committed in "+repo
		return v, nil
	}
	v.How += "; " + why
	return v, nil
}

func (e Entry) words() string {
	switch e.Kind {
	case KindRecording:
		return "written by your recorder"
	case KindFixture:
		return "written by your reduce"
	case KindAllowed:
		return "allowed with reduce trust"
	}
	return "in your trust store"
}

// Of decides for a batch file of that digest (fixtures.WithDigest: the
// bytes that were read) that names runs (fixtures.Batch.Runs: what a replay
// would run of what it names): its digest in the user's store. A file that
// names nothing runs nothing of its own, and is the user's as far as
// running goes. A commit is no proof for a batch file: a directory from
// elsewhere may carry a .git of its own that commits it, and a colleague's
// file committed in the user's repository is a file from someone else.
func Of(digest string, runs []string) Verdict {
	v := Verdict{Digest: digest}
	if len(runs) == 0 {
		v.Mine, v.How = true, "it names nothing to run"
		return v
	}
	store, err := DefaultStore()
	if err != nil {
		v.How = err.Error()
		return v
	}
	if e, ok := store.Lookup(digest); ok {
		v.Mine, v.How = true, e.words()
		return v
	}
	v.How = "not in your trust store (" + store.Dir + ")"
	return v
}

// Carry records the file at path as the user's, of the kind the store
// gives the file of from (its digest, as read), when that one is the
// user's: `reduce convert` of a recording of theirs writes one of theirs.
// It reports whether it did.
func Carry(from, path string) (bool, error) {
	store, err := DefaultStore()
	if err != nil {
		return false, nil
	}
	e, ok := store.Lookup(from)
	if !ok {
		return false, nil
	}
	digest, err := Digest(path)
	if err != nil {
		return false, err
	}
	abs, _ := filepath.Abs(path)
	return true, store.Add(digest, Entry{Kind: e.Kind, Path: abs, Runs: e.Runs})
}
