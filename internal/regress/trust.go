package regress

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"reduce/fixtures"
	"reduce/internal/trust"
)

// plainName is a file name a fixture.json may name: a name in the
// fixture's own directory, never a path (no separator, no "..", not
// hidden), as Write names its files.
var plainName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`)

// Fixture is a fixture directory as its tests see it: its record and the
// files they read, by plain name.
type Fixture struct {
	Dir    string
	Record Record
	// Files are fixture.json and the batch files the record names (and
	// their copies in the exec command's format), each a regular file of
	// Dir: a name that is a path, or a link, is refused by ReadFixture.
	Files []string
	// Others are the directory's other entries (report.md, and whatever
	// someone else put there: a conftest.py pytest would import).
	Others []string
	// digests are the files' SHA-256 (trust.Digest), taken from the bytes
	// read where they were read (fixture.json, the batches Runs read), so
	// that what is signed is what was shown.
	digests map[string]string
}

// ReadFixture reads the fixture in dir as the collector reads it
// (reduce_collect.py's Fixture and fixture_files): fixture.json, then the
// files it names, each of which must be a plain name of a regular file in
// dir. A fixture directory is data: a name such as ../../crash.bin or
// /etc/passwd, or a link, is an error naming it, and nothing is read
// outside dir.
func ReadFixture(dir string) (*Fixture, error) {
	data, err := readNoFollow(filepath.Join(dir, RecordFile))
	if err != nil {
		return nil, fmt.Errorf("%s: %w (%v)", dir, ErrNotFixture, err)
	}
	f := &Fixture{Dir: dir, Files: []string{RecordFile}, digests: map[string]string{RecordFile: trust.RecordDigest(data)}}
	if err := json.Unmarshal(data, &f.Record); err != nil {
		return nil, fmt.Errorf("%s: %w (%s: %v)", dir, ErrNotFixture, RecordFile, err)
	}
	names := []string{BatchFile}
	if b := f.Record.Boundary; b != nil {
		names = append(names, b.File)
	}
	for _, n := range f.Record.Neighbours {
		names = append(names, n.File)
	}
	ext := ""
	if format, err := fixtures.ParseFormat(f.Record.ReplayFormat); err == nil && format != fixtures.FormatBin {
		ext = format.Ext()
	}
	for _, name := range names {
		if !plainName.MatchString(name) {
			return nil, fmt.Errorf("%s/%s names the batch file %q: a fixture names files of its own directory only, by plain name", dir, RecordFile, fixtures.Printable(name))
		}
		stem := strings.TrimSuffix(name, filepath.Ext(name))
		for _, n := range []string{name, stem + ext} {
			if n == stem || slices.Contains(f.Files, n) {
				continue
			}
			st, err := os.Lstat(filepath.Join(dir, n))
			switch {
			case err != nil && n != name:
				continue // the exec format's copy of a batch the record names: written only for the batches it runs
			case err != nil:
				return nil, fmt.Errorf("%s: %w", dir, err)
			case !st.Mode().IsRegular():
				return nil, fmt.Errorf("%s/%s is not a regular file (%s): a fixture's files are its own, never links", dir, n, st.Mode().Type())
			}
			f.Files = append(f.Files, n)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	for _, e := range entries {
		if !slices.Contains(f.Files, e.Name()) {
			f.Others = append(f.Others, e.Name())
		}
	}
	return f, nil
}

// imported lists the files pytest imports by itself from a directory it
// collects (a conftest.py, an __init__.py): such a fixture directory is none
// of reduce's, and its collector collects none of it.
func (f *Fixture) imported() []string {
	var py []string
	for _, o := range f.Others {
		if o == "conftest.py" || o == "__init__.py" {
			py = append(py, o)
		}
	}
	return py
}

// python lists the Python files and directories among f.Others: none of
// them reduce's (it writes no Python into a fixture); an --entry of the
// fixture may name one.
func (f *Fixture) python() []string {
	var py []string
	for _, o := range f.Others {
		if o != ReportFile && (strings.HasSuffix(o, ".py") || strings.HasSuffix(o, ".pyc") || o == "__pycache__") {
			py = append(py, o)
		}
	}
	return py
}

// Runs lists, in words for a person, what the fixture's tests would run
// of what it names: its --entry function, its command, the step its
// batches record (and the class, the interpreter). Empty for a fixture of
// a built-in op whose batches name nothing.
func (f *Fixture) Runs() ([]string, error) {
	var runs []string
	if e := f.Record.Entry; e != "" {
		runs = append(runs, "the --entry function "+fixtures.Printable(e))
	}
	if a := f.Record.ReplayArgs; len(a) > 0 {
		runs = append(runs, "the command "+fixtures.Printable(strings.Join(a, " ")))
	}
	for _, name := range f.Files {
		if filepath.Ext(name) != ".bin" {
			continue
		}
		var digest string
		b, err := fixtures.Read(filepath.Join(f.Dir, name), fixtures.WithDigest(&digest))
		if err != nil {
			return nil, err
		}
		f.digests[name] = digest
		for _, r := range b.Runs() {
			if !slices.Contains(runs, r) {
				runs = append(runs, r)
			}
		}
	}
	return runs, nil
}

// Sign records the fixture's files in store as the user's, of kind
// (trust.KindFixture: reduce wrote it from a batch that was the user's;
// trust.KindAllowed: `reduce trust`), so that its tests run what it names
// (the collector's Trust); it returns what it runs.
func (f *Fixture) Sign(store trust.Store, kind string) ([]string, error) {
	runs, err := f.Runs()
	if err != nil {
		return nil, err
	}
	for _, name := range f.Files {
		path := filepath.Join(f.Dir, name)
		digest, ok := f.digests[name]
		if !ok { // a copy in the exec command's format: data the command reads
			if digest, err = trust.Digest(path); err != nil {
				return nil, err
			}
		}
		abs, _ := filepath.Abs(path)
		if err := store.Add(digest, trust.Entry{Kind: kind, Path: abs, Runs: runs}); err != nil {
			return nil, err
		}
	}
	return runs, nil
}

// Allow records path, a batch file or a fixture directory, in store as
// the user's (trust.KindAllowed), having read what it runs: `reduce trust`.
// What it records are the bytes it read, and showed. A file whose step is
// one of reduce's own functions is refused: it never runs. With forget it
// removes the entries instead. It returns what it did, in words for a
// person (what the path runs).
func Allow(store trust.Store, path string, forget bool) (string, error) {
	var (
		runs    []string
		digests []string
		files   []string
	)
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		f, err := ReadFixture(path)
		if err != nil {
			return "", err
		}
		if py := f.imported(); len(py) > 0 && !forget {
			return "", fmt.Errorf("%s holds %s, which reduce never writes into a fixture and pytest imports: nothing is allowed; read it, and remove it first",
				path, fixtures.Printable(strings.Join(py, ", ")))
		}
		if runs, err = f.Runs(); err != nil {
			return "", err
		}
		if forget {
			for _, name := range f.Files {
				files = append(files, filepath.Join(f.Dir, name))
			}
		} else if _, err := f.Sign(store, trust.KindAllowed); err != nil {
			return "", err
		}
	} else {
		var digest string
		b, err := fixtures.Read(path, fixtures.WithDigest(&digest))
		if err != nil {
			return "", err
		}
		if s := b.Step; s != nil && b.Op == "" {
			if why := trust.OwnStep(s.Module, s.Qualname, s.File); why != "" {
				return "", fmt.Errorf("%s: the recorded step %s: %s, and reduce's own functions are never a step: nothing to allow",
					path, fixtures.Printable(s.Module+":"+s.Qualname), fixtures.Printable(why))
			}
		}
		runs, digests = b.Runs(), []string{digest}
		abs, _ := filepath.Abs(path)
		if !forget {
			if err := store.Add(digest, trust.Entry{Kind: trust.KindAllowed, Path: abs, Runs: runs}); err != nil {
				return "", err
			}
		}
	}
	if !forget {
		if len(runs) == 0 {
			return "allowed: it runs nothing of its own (a built-in op)", nil
		}
		return "allowed: it runs " + strings.Join(runs, "; "), nil
	}
	for _, file := range files {
		digest, err := trust.Digest(file)
		if err != nil {
			return "", err
		}
		digests = append(digests, digest)
	}
	had := false
	for _, d := range digests {
		removed, err := store.Remove(d)
		if err != nil {
			return "", err
		}
		had = had || removed
	}
	switch {
	case !had:
		return "not in the trust store", nil
	case len(files) > 0:
		return "forgotten: it runs what it names only where your repository commits it", nil
	}
	return "forgotten: it runs nothing it names", nil
}

// FixtureDescription is what `reduce inspect DIR` says of a fixture
// directory: its files, what its tests run, and whether it is the user's.
type FixtureDescription struct {
	Dir    string   `json:"dir"`
	Status Status   `json:"status"`
	Files  []string `json:"files"`
	Runs   []string `json:"runs"`
	Mine   bool     `json:"mine"`
	Trust  string   `json:"trust"`
	// Others are the directory's other entries; Python those of them
	// reduce never writes, which pytest would import.
	Others []string `json:"others"`
	Python []string `json:"python"`
}

// DescribeFixture reads the fixture in dir as data and decides, as the
// collector does in root (pytest's root directory: a commit there counts
// for a fixture's files), whether its tests may run what it names.
func DescribeFixture(dir, root string) (*FixtureDescription, error) {
	f, err := ReadFixture(dir)
	if err != nil {
		return nil, err
	}
	runs, err := f.Runs()
	if err != nil {
		return nil, err
	}
	d := &FixtureDescription{Dir: dir, Status: f.Record.Status, Files: f.Files, Runs: runs, Mine: true,
		Trust: "it names nothing to run: a built-in op's", Others: f.Others, Python: f.python()}
	if len(runs) == 0 {
		d.Runs = []string{}
		return d, nil
	}
	for _, name := range f.Files {
		v, err := trust.Check(filepath.Join(dir, name), f.digests[name], root)
		if err != nil {
			return nil, err
		}
		if d.Trust = v.How; !v.Mine {
			d.Mine, d.Trust = false, name+": "+v.How
			break
		}
	}
	return d, nil
}

// WriteText writes d for a person, every string from the files escaped.
func (d *FixtureDescription) WriteText(w io.Writer) error {
	p := fixtures.Printable
	fmt.Fprintf(w, "%s: a fixture (%s), files %s\n", p(d.Dir), d.Status, p(strings.Join(d.Files, ", ")))
	if len(d.Python) > 0 {
		fmt.Fprintf(w, "also %s: Python, which reduce never writes into a fixture (pytest imports a conftest.py or __init__.py of a directory it is run on, and reduce's collector collects no directory holding one)\n",
			p(strings.Join(d.Python, ", ")))
	}
	if len(d.Runs) == 0 {
		_, err := fmt.Fprintln(w, "runs: nothing of its own (a built-in op): its tests run it as data")
		return err
	}
	fmt.Fprintf(w, "runs: %s\n", p(strings.Join(d.Runs, "; ")))
	if d.Mine {
		_, err := fmt.Fprintf(w, "  yours (%s): its tests run them\n", p(d.Trust))
		return err
	}
	_, err := fmt.Fprintf(w, "  not yours (%s): its tests run none of them until you allow it, reduce trust %s\n", p(d.Trust), fixtures.ShellQuote(d.Dir))
	return err
}
