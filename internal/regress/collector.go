package regress

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/renameio/v2"

	"reduce/fixtures"
)

// CollectorFile is the file WriteCollector keeps at the root of the
// fixtures' directory: the one pytest collector that turns every
// fixture.json under it into tests.
const CollectorFile = "conftest.py"

// CollectorMark begins the first line of the collector reduce writes (the
// version follows it): a conftest.py whose first line starts otherwise is
// not reduce's.
const CollectorMark = "# reduce collector "

// ErrForeignCollector is returned by CheckCollector and WriteCollector when
// the fixtures' directory holds a conftest.py that is not reduce's: it is
// never overwritten.
var ErrForeignCollector = errors.New("a conftest.py that is not reduce's")

// CheckCollector returns an error wrapping ErrForeignCollector when out
// holds a conftest.py that reduce did not write; nil when it holds reduce's
// (of any version) or none; an error wrapping ErrLink when it is a
// symbolic link. The reduction checks it before any replay.
func CheckCollector(out string) error {
	path := filepath.Join(out, CollectorFile)
	f, err := OpenNoFollow(path, os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if errors.Is(err, ErrLink) {
		return err
	}
	if err != nil {
		return fmt.Errorf("the collector %s: %w", path, err)
	}
	defer f.Close()
	first, err := bufio.NewReader(f).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("the collector %s: %w", path, err)
	}
	if !strings.HasPrefix(first, CollectorMark) {
		return fmt.Errorf("%s: %w (its first line is not %q): reduce keeps its collector there and never "+
			"overwrites another file; move yours (to the repository's own conftest.py, say), or give another --out",
			path, ErrForeignCollector, strings.TrimSpace(CollectorMark)+" VERSION: ...")
	}
	return nil
}

// ReadCollector returns reduce's conftest.py at the root of out, nil when
// there is none; an error where CheckCollector has one.
func ReadCollector(out string) ([]byte, error) {
	if err := CheckCollector(out); err != nil {
		return nil, err
	}
	data, err := readNoFollow(filepath.Join(out, CollectorFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return data, err
}

// WriteCollector writes src, the collector (replay.CollectorModule), as
// conftest.py at the root of out, atomically, unless it is there already
// with these bytes: reduce's collector of another version is rewritten, a
// conftest.py that is not reduce's is left alone (an error wrapping
// ErrForeignCollector). out is created when missing.
func WriteCollector(out string, src []byte) error {
	if !bytes.HasPrefix(src, []byte(CollectorMark)) {
		return fmt.Errorf("write the collector: its source does not start with %q", CollectorMark)
	}
	if err := CheckCollector(out); err != nil {
		return err
	}
	return writeChanged(out, CollectorFile, src, "the collector")
}

// writeChanged writes data as dir/name, atomically, dir made when missing,
// unless the file holds these bytes already; what names the file in an
// error. A symbolic link at dir/name is an error wrapping ErrLink.
func writeChanged(dir, name string, data []byte, what string) error {
	path := filepath.Join(dir, name)
	if have, err := readNoFollow(path); err == nil && bytes.Equal(have, data) {
		return nil
	} else if errors.Is(err, ErrLink) {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write %s: %w", what, err)
	}
	if err := renameio.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", what, err)
	}
	return nil
}

// VendoredDir is the folder under --out that holds the package's zip
// beside a conftest.py that imports the plugin from it (WriteVendored).
const VendoredDir = ".reduce"

// WriteVendored writes data, the Python package as a zip (replay.ZipName,
// name), as VendoredDir/name under out, atomically, unless it is there with
// these bytes. No symbolic link is followed: out/VendoredDir or the file
// being one is an error wrapping ErrLink. PruneVendored removes the others
// once the conftest.py that names this one is written.
func WriteVendored(out, name string, data []byte) error {
	dir := filepath.Join(out, VendoredDir)
	if err := NoLink(dir); err != nil {
		return err
	}
	return writeChanged(dir, name, data, "the vendored package")
}

// PruneVendored removes reduce's zips other than name under
// out/VendoredDir: those of other versions, which no conftest.py names.
func PruneVendored(out, name string) {
	old, _ := filepath.Glob(filepath.Join(out, VendoredDir, "reduce_batch-*.zip"))
	for _, o := range old {
		if filepath.Base(o) != name && NoLink(o) == nil {
			os.Remove(o)
		}
	}
}

// ErrNotFixture is returned by MarkFixed for a directory that holds no
// fixture.json of this reduce.
var ErrNotFixture = errors.New("not a regression fixture of this reduce")

// MarkFixed sets the status of the fixture in dir to fixed, rewriting its
// fixture.json atomically: its bug is fixed, and the collector's test of
// the minimal batch guards the fix from then on. It reports whether the
// status changed (false: it was fixed already). The status is no part of
// the fixture's identity: its name stays right. The error wraps
// ErrNotFixture for a directory without a fixture.json of RecordVersion,
// ErrLink for a fixture.json that is a symbolic link (dir itself, as the
// user named it, is followed).
func MarkFixed(dir string) (bool, error) {
	path := filepath.Join(dir, RecordFile)
	data, err := readNoFollow(path)
	if errors.Is(err, ErrLink) {
		return false, err
	}
	if err != nil {
		if held, _ := filepath.Glob(filepath.Join(dir, "*", RecordFile)); len(held) > 0 {
			// The folder of --out: the fixtures are its directories.
			return false, fmt.Errorf("%s: %w: it holds fixtures, one per directory; name the one whose bug is fixed, such as reduce fixed %s",
				dir, ErrNotFixture, fixtures.ShellQuote(filepath.Dir(held[0])))
		}
		return false, fmt.Errorf("%s: %w (%v)", dir, ErrNotFixture, err)
	}
	// Numbers stay as written (json.Number), so that the record encodes
	// again to the same bytes, its status aside.
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var rec Record
	if err := dec.Decode(&rec); err != nil {
		return false, fmt.Errorf("%s: %w (%s: %v)", dir, ErrNotFixture, RecordFile, err)
	}
	if rec.Version != RecordVersion {
		return false, fmt.Errorf("%s: %w (%s version %d, this reduce writes %d): regenerate it with `reduce --batch %s`",
			dir, ErrNotFixture, RecordFile, rec.Version, RecordVersion, fixtures.ShellQuote(rec.Source.File))
	}
	switch rec.Status {
	case StatusFixed:
		return false, nil
	case StatusOpen:
	default:
		return false, fmt.Errorf("%s: %w (%s: status %q, want %q or %q)", dir, ErrNotFixture, RecordFile, rec.Status, StatusOpen, StatusFixed)
	}
	rec.Status = StatusFixed
	js, err := recordJSON(&rec)
	if err != nil {
		return false, err
	}
	if err := renameio.WriteFile(path, js, 0o644); err != nil {
		return false, fmt.Errorf("%s: %w", dir, err)
	}
	return true, nil
}
