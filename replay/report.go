package replay

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
)

// ReportPrefix starts the line on a worker's stdout that reports what the
// replay of a built-in op showed besides its exit status and stderr: the
// prefix, then a Report as JSON. The go worker and the torch worker
// (reduce_replay.py) print it; a command of the user's (the exec backend)
// is never read for one.
const ReportPrefix = "reduce-report: "

// MaxReportValues bounds Output.Values: an output with more elements is
// reported by its sum only.
const MaxReportValues = 64

// Report is what a worker says of one replay of a built-in op: its outputs
// when it passed, the exception it raised on the CPU when it failed. The
// fixtures' expectations come from it (the boundary and neighbour batches'
// outputs, the minimal batch's CPU failure), so that nothing runs an op a
// second time to learn what a replay already showed.
type Report struct {
	Outputs []Output `json:"outputs,omitempty"`
	// CPU is the failure on the CPU: the replay's own on the CPU; on
	// another device (the go worker's CUDA mode, the torch worker on a GPU)
	// that of the same batch run again on the CPU, when it fails there. The
	// go worker reports it for a batch that passes on the device too,
	// instead of its outputs.
	CPU *CPUFailure `json:"cpu,omitempty"`
}

// Output is one output of a passing op: dtype, shape, its values in
// row-major order when it has at most MaxReportValues of them, and always
// their sum and the sum of their magnitudes (what a tolerance on the sum
// is scaled by). An output with a NaN or an infinity is not reported.
type Output struct {
	Name   string    `json:"name"`
	DType  string    `json:"dtype"`
	Shape  []int64   `json:"shape"`
	Values []float64 `json:"values,omitempty"`
	Sum    float64   `json:"sum"`
	SumAbs float64   `json:"sum_abs"`
}

// Numel is the output's number of elements.
func (o Output) Numel() int64 {
	n := int64(1)
	for _, d := range o.Shape {
		n *= d
	}
	return n
}

// CPUFailure is the exception an op raised on the CPU: its Python class
// and str(exception) exactly.
type CPUFailure struct {
	Exception string `json:"exception"`
	Message   string `json:"message"`
}

// writeReport prints r as the report line; nothing for an empty report.
func writeReport(w io.Writer, r Report) error {
	if len(r.Outputs) == 0 && r.CPU == nil {
		return nil
	}
	line, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = w.Write(append(append([]byte(ReportPrefix), line...), '\n'))
	return err
}

// ParseReport reads the last report line of a worker's stdout; nil when
// there is none or it does not parse (a report is information, never a
// verdict: the exit status and stderr decide those).
func ParseReport(stdout []byte) *Report {
	i := bytes.LastIndex(stdout, []byte(ReportPrefix))
	if i < 0 || (i > 0 && stdout[i-1] != '\n') {
		return nil
	}
	line, _, _ := bytes.Cut(stdout[i+len(ReportPrefix):], []byte("\n"))
	var r Report
	if err := json.Unmarshal(line, &r); err != nil {
		return nil
	}
	for _, o := range r.Outputs {
		if o.Name == "" || math.IsNaN(o.Sum) || (len(o.Values) > 0 && int64(len(o.Values)) != o.Numel()) {
			return nil
		}
	}
	if len(r.Outputs) == 0 && r.CPU == nil {
		return nil
	}
	return &r
}
