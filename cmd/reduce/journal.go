package main

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

	"reduce/internal/signature"
	"reduce/shrink"
)

// journal is the record of every answered candidate of a reduction, one
// JSON line each, appended as the answers come. An interrupted reduction
// keeps it; `--resume` reads it back, so that no candidate answered before
// is replayed again; a reduction that completes removes it.
//
// A candidate is named by a key that says what it is in terms of the
// original batch (the phase, the samples kept, the elements kept, the
// value tried), so the same key means the same candidate in any run over
// the same file with the same settings. The header line pins those: a
// journal written for another file, backend, device or match level is
// refused rather than trusted.
type journal struct {
	path string

	mu      sync.Mutex
	f       *os.File
	answers map[string]journalEntry
	loaded  map[string]bool // answers read from the file by --resume
	resumed int
}

const journalVersion = 1

type journalHeader struct {
	Journal int    `json:"journal"`
	Source  string `json:"source"`
	Backend string `json:"backend"`
	Device  string `json:"device"`
	Match   string `json:"match"`
	Entry   string `json:"entry,omitempty"`
	Replay  string `json:"replay,omitempty"`
	// Settings are the other flags that can change an answer, as given.
	Settings map[string]string   `json:"settings,omitempty"`
	Want     signature.Signature `json:"want"`
}

type journalEntry struct {
	Key       string              `json:"key"`
	Outcome   shrink.Outcome      `json:"outcome"`
	Signature signature.Signature `json:"signature"`
}

// journalPath is where the journal of a reduction of the file with the
// given content hash lives: beside the fixtures, hidden from go's ./...
// patterns by its leading dot.
func journalPath(out, srcHash string) string {
	return filepath.Join(out, ".reduce-"+srcHash[:12]+".journal")
}

// openJournal starts the journal at path. With resume it must exist, match
// head, and its answers are loaded; without, any old one is replaced.
// replaced reports that a journal was there and was started afresh.
func openJournal(path string, head journalHeader, resume bool) (j *journal, replaced bool, err error) {
	j = &journal{path: path, answers: map[string]journalEntry{}, loaded: map[string]bool{}}
	head.Journal = journalVersion
	if resume {
		var data []byte
		data, err = os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, false, usagef("--resume: no journal at %s (it is kept when a reduction with the same --out is interrupted); run without --resume", path)
		}
		if err != nil {
			return nil, false, fmt.Errorf("--resume: %w", err)
		}
		if err := j.load(data, head); err != nil {
			return nil, false, usagef("--resume: journal %s: %v", path, err)
		}
		var f *os.File
		f, err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0o644)
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
		return j, replaced, nil
	}
	if _, err := os.Stat(path); err == nil {
		replaced = true
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, false, fmt.Errorf("--out: %w", err)
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, false, fmt.Errorf("journal: %w", err)
	}
	line, _ := json.Marshal(head)
	if _, err := f.Write(append(line, '\n')); err != nil {
		f.Close()
		return nil, false, fmt.Errorf("journal %s: %w", path, err)
	}
	j.f = f
	return j, replaced, nil
}

func (j *journal) load(data []byte, head journalHeader) error {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<16), 1<<26)
	if !sc.Scan() {
		return fmt.Errorf("empty")
	}
	var got journalHeader
	if err := json.Unmarshal(sc.Bytes(), &got); err != nil || got.Journal == 0 {
		return fmt.Errorf("the first line is not a journal header")
	}
	if got.Journal != journalVersion {
		return fmt.Errorf("version %d, this reduce reads %d", got.Journal, journalVersion)
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
		j.answers[e.Key] = e
		j.loaded[e.Key] = true
	}
	return sc.Err()
}

// lookup returns the answer recorded for key, if any: one of an earlier
// run (counted as resumed) or one of this run's (the same candidate asked
// again from another phase).
//
// fromFile is set the first time an answer of an earlier run is used.
func (j *journal) lookup(key string) (e journalEntry, ok, fromFile bool) {
	if j == nil {
		return journalEntry{}, false, false
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	e, ok = j.answers[key]
	if ok && j.loaded[key] {
		j.resumed++
		delete(j.loaded, key)
		fromFile = true
	}
	return e, ok, fromFile
}

// record appends an answer. A journal that cannot be written is not worth
// stopping the reduction for: the answer is kept in memory.
func (j *journal) record(key string, o shrink.Outcome, s signature.Signature) {
	if j == nil {
		return
	}
	e := journalEntry{Key: key, Outcome: o, Signature: s}
	line, err := json.Marshal(e)
	if err != nil {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.answers[key] = e
	if j.f != nil {
		if _, err := j.f.Write(append(line, '\n')); err != nil {
			j.f.Close()
			j.f = nil
		}
	}
}

// Resumed is the number of answers taken from the journal.
func (j *journal) Resumed() int {
	if j == nil {
		return 0
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.resumed
}

// close ends the journal; remove deletes it (the reduction completed).
func (j *journal) close(remove bool) {
	if j == nil {
		return
	}
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
