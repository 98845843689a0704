package reduction

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"reduce/internal/regress"
	"reduce/internal/signature"
	"reduce/replay"
)

// journal is the one cache of answers of a reduction: every candidate
// answered, by its description and trial, with the signature its replay
// showed; in memory, and appended to a file as the answers come, one JSON
// line each. An interrupted reduction keeps the file; --resume reads it
// back, so that no candidate answered before is replayed again (but a
// culprit set or a minimal batch whose failure only the journal showed,
// once, failsHere); a reduction that completes removes it.
//
// The header line pins what the answers depend on (the file, the
// backend's settings, trials, match level): a journal written under
// other settings is refused rather than trusted, and since the settings
// have their defaults filled in, a flag given at its default value is no
// mismatch.
type journal struct {
	path string

	mu      sync.Mutex
	f       *os.File
	answers map[answerKey]journalAnswer
	loaded  map[answerKey]bool // answers read from the file by --resume, not used yet
}

// journalAnswer is what a replay showed: its signature, the worker's
// report (a built-in op's outputs, or its failure on the CPU), from which
// the fixtures' expectations come, and what else the fixtures take from
// its output (printed); resumed says it was read from the file, an answer
// of an earlier run that this one did not replay.
type journalAnswer struct {
	sig     signature.Signature
	report  *replay.Report
	printed printed
	resumed bool
}

// printed is what the reduction reads from a failing replay's output
// besides its signature: the failure's line (signature.Message) and where
// its exception was raised (signature.RaisedAt). It is journaled with the
// answer, so that a resumed reduction, which has no output of the answers
// it takes from the journal, writes the fixture an uninterrupted one
// writes.
type printed struct {
	Message string           `json:"message,omitempty"`
	Raised  *signature.Raise `json:"raised,omitempty"`
}

// printedOf is what v's output says besides its signature s; nothing for
// a replay that passed.
func printedOf(v *replay.Verdict, s signature.Signature) printed {
	if v == nil || !signature.Failing(s) {
		return printed{}
	}
	return printed{Message: signature.Message(v.Result.Stderr, s), Raised: signature.RaisedAt(v.Result.Stderr)}
}

type answerKey struct {
	key   string
	trial int
}

// journalVersion 5: answers keyed by candidate description and trial, each
// with the worker's report, from which the fixtures' expectations come, and
// what the fixtures read from the replay's output (printed); an edit's
// description names its donors, and a step's dropped elements take their
// values.
const journalVersion = 5

// journalHeader is the first line of a journal.
type journalHeader struct {
	Journal  int                  `json:"journal"`
	Source   string               `json:"source"`
	Settings replay.Settings      `json:"settings"`
	Trials   int                  `json:"trials"`
	Match    signature.MatchLevel `json:"match"`
	// Want is the recorded failure's signature (zero when none was
	// recorded: the first failure replayed is kept).
	Want signature.Signature `json:"want"`
}

type journalEntry struct {
	Key       string              `json:"key"`
	Trial     int                 `json:"trial"`
	Signature signature.Signature `json:"signature"`
	Report    *replay.Report      `json:"report,omitempty"`
	printed
}

// journalPath is where the journal of a reduction of the file with the
// given content hash lives: beside the fixtures, hidden from go's ./...
// patterns and pytest by its leading dot.
func journalPath(out, srcHash string) string {
	return filepath.Join(out, ".reduce-"+srcHash[:12]+".journal")
}

// openJournal starts the journal at path. With resume it must exist, match
// head, and its answers are loaded; without, any old one is replaced. A
// symbolic link at path is bad usage, never followed.
// replaced reports that a journal was there and was started afresh.
func openJournal(path string, head journalHeader, resume bool) (j *journal, replaced bool, err error) {
	j = &journal{path: path, answers: map[answerKey]journalAnswer{}, loaded: map[answerKey]bool{}}
	head.Journal = journalVersion
	if resume {
		if err := regress.NoLink(path); err != nil {
			return nil, false, errorf(ErrUsage, "%v", err)
		}
		data, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, false, errorf(ErrResume, "--resume: no journal at %s (it is kept when a reduction with the same --out is interrupted); run without --resume", path)
		}
		if err != nil {
			return nil, false, fmt.Errorf("--resume: %w", err)
		}
		if err := j.load(data, head); err != nil {
			return nil, false, errorf(ErrResume, "--resume: journal %s: %v", path, err)
		}
		f, err := regress.OpenNoFollow(path, os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, false, fmt.Errorf("--resume: %w", err)
		}
		// A line cut short by a crash is dropped, so that the next answer
		// starts a line of its own.
		if i := bytes.LastIndexByte(data, '\n'); i < len(data)-1 {
			if err := f.Truncate(int64(i + 1)); err != nil {
				f.Close()
				return nil, false, fmt.Errorf("--resume: %w", err)
			}
		}
		j.f = f
		return j, false, nil
	}
	if _, err := os.Lstat(path); err == nil {
		replaced = true
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, false, errorf(ErrUsage, "--out: %v: give a directory reduce can create and write", err)
	}
	f, err := regress.OpenNoFollow(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o666) // os.Create, refusing a link
	if errors.Is(err, regress.ErrLink) {
		return nil, false, errorf(ErrUsage, "%v", err)
	}
	if err != nil {
		return nil, false, errorf(ErrUsage, "--out %s: %v: give a directory reduce can create and write", filepath.Dir(path), unwrapPath(err))
	}
	line, err := json.Marshal(head)
	if err == nil {
		_, err = f.Write(append(line, '\n'))
	}
	if err != nil {
		f.Close()
		return nil, false, fmt.Errorf("journal %s: %w", path, err)
	}
	j.f = f
	return j, replaced, nil
}

func (j *journal) load(data []byte, head journalHeader) error {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<16), 1<<28)
	if !sc.Scan() {
		return fmt.Errorf("empty")
	}
	var got journalHeader
	if err := json.Unmarshal(sc.Bytes(), &got); err != nil || got.Journal == 0 {
		return fmt.Errorf("the first line is not a journal header")
	}
	if got.Journal != journalVersion {
		return fmt.Errorf("version %d, this reduce reads %d: run without --resume", got.Journal, journalVersion)
	}
	gh, _ := json.Marshal(got)
	wh, _ := json.Marshal(head)
	if !bytes.Equal(gh, wh) {
		return fmt.Errorf("it was written for another reduction (%s), this one is %s: use the same file and flags, or run without --resume", gh, wh)
	}
	for n := 2; sc.Scan(); n++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var e journalEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Key == "" {
			// Only the last line can be cut short by a crash; anything
			// else is damage.
			if bytes.HasSuffix(data, sc.Bytes()) {
				break
			}
			return fmt.Errorf("line %d is not an answer", n)
		}
		k := answerKey{e.Key, e.Trial}
		j.answers[k] = journalAnswer{sig: e.Signature, report: e.Report, printed: e.printed, resumed: true}
		j.loaded[k] = true
	}
	return sc.Err()
}

// lookup returns the answer recorded for trial of the candidate key
// describes, if any: one of an earlier run (fromFile, the first time it
// is used: the reduction counts it as resumed) or one of this run's (the
// same candidate asked again, by another phase or another search).
func (j *journal) lookup(key string, trial int) (a journalAnswer, ok, fromFile bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	k := answerKey{key, trial}
	a, ok = j.answers[k]
	if ok && j.loaded[k] {
		delete(j.loaded, k)
		fromFile = true
	}
	return a, ok, fromFile
}

// record keeps an answer. A journal that cannot be written is not worth
// stopping the reduction for: the answer is kept in memory.
func (j *journal) record(key string, trial int, s signature.Signature, rep *replay.Report, p printed) {
	line, err := json.Marshal(journalEntry{Key: key, Trial: trial, Signature: s, Report: rep, printed: p})
	j.mu.Lock()
	defer j.mu.Unlock()
	j.answers[answerKey{key, trial}] = journalAnswer{sig: s, report: rep, printed: p}
	if j.f != nil && err == nil {
		if _, err := j.f.Write(append(line, '\n')); err != nil {
			j.f.Close()
			j.f = nil
		}
	}
}

// answerAt is the answer kept for trial of the candidate key describes,
// with the worker's report (nil when it reported nothing).
func (j *journal) answerAt(key string, trial int) (signature.Signature, *replay.Report, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	a, ok := j.answers[answerKey{key, trial}]
	return a.sig, a.report, ok
}

// resumedAt says whether the answer kept for trial of the candidate key
// describes is an earlier run's, read from the file: no replay of this
// run showed it.
func (j *journal) resumedAt(key string, trial int) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.answers[answerKey{key, trial}].resumed
}

// close ends the journal; remove deletes its file (the reduction
// completed).
func (j *journal) close(remove bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f != nil {
		j.f.Close()
		j.f = nil
	}
	if remove {
		os.Remove(j.path)
	}
}
