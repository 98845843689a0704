package regress

import (
	"bytes"
	"fmt"
	"strconv"

	"reduce/fixtures"
	"reduce/kernels"
	"reduce/replay"
)

// Replayed is what a replay of b on the CPU reports (the go worker, run in
// this process: replay.Worker and its report line), as a reduction records
// it: the failure there, or the outputs as fixture.json holds them. The
// tests build their records from it as the reduction does from its
// replays. The error is for a batch the worker cannot run.
func Replayed(b *fixtures.Batch, deviceMemory int64) (*CPUFailure, []OutputValue, error) {
	var in, stdout, stderr bytes.Buffer
	if err := fixtures.Encode(&in, b); err != nil {
		return nil, nil, err
	}
	args := []string{"--device", "cpu", "--device-memory", strconv.FormatInt(deviceMemory, 10)}
	code := replay.Worker(args, &in, &stdout, &stderr, nil)
	if code != 0 && code != 1 {
		return nil, nil, fmt.Errorf("the worker exits %d: %s", code, stderr.String())
	}
	rep := replay.ParseReport(stdout.Bytes())
	if code == 1 {
		if rep == nil || rep.CPU == nil {
			return nil, nil, fmt.Errorf("the worker fails and reports no CPU failure: %s", stderr.String())
		}
		return &CPUFailure{Exception: rep.CPU.Exception, Message: rep.CPU.Message}, nil, nil
	}
	var inputs []kernels.DType
	for _, e := range b.Tensors {
		inputs = append(inputs, e.DType)
	}
	var outs []OutputValue
	if rep != nil {
		for _, o := range rep.Outputs {
			dt, err := kernels.ParseDType(o.DType)
			if err != nil {
				return nil, nil, err
			}
			outs = append(outs, OutputValueOf(o.Name, dt, o.Shape, o.Values, o.Sum, o.SumAbs, inputs))
		}
	}
	return nil, outs, nil
}
