package kernels_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/kernels"
)

// TestCheckArgs: the op's contract without the tensors, as replay.Step
// checks a recorded batch: every required tensor named (an alias counts,
// once), required attributes given, a string attribute one of its
// choices; the attributes given are what is checked, defaults only for
// those not given. A run binds the same names.
func TestCheckArgs(t *testing.T) {
	ce, err := kernels.Lookup("cross_entropy")
	require.NoError(t, err)
	oneHot, err := kernels.Lookup("one_hot")
	require.NoError(t, err)
	sel, err := kernels.Lookup("index_select")
	require.NoError(t, err)
	for _, tc := range []struct {
		name    string
		op      *kernels.Op
		tensors []string
		attrs   map[string]any
		want    error
		text    string
	}{
		{"complete", ce, []string{"input", "target"}, nil, nil, ""},
		{"optional given", ce, []string{"input", "target", "weight"}, map[string]any{"reduction": "sum"}, nil, ""},
		{"missing tensor", ce, []string{"input"}, nil, kernels.ErrTensorArg, `missing tensor "target" (the batch holds input)`},
		{"unknown tensor", ce, []string{"input", "target", "bias"}, nil, kernels.ErrTensorArg, `takes no tensor "bias"`},
		{"not a choice", ce, []string{"input", "target"}, map[string]any{"reduction": "avg"}, kernels.ErrAttr, `reduction "avg": want one of none, mean, elementwise_mean, sum`},
		{"alias", oneHot, []string{"input"}, nil, nil, ""},
		{"name", oneHot, []string{"tensor"}, map[string]any{"num_classes": 4}, nil, ""},
		{"alias and name", oneHot, []string{"tensor", "input"}, nil, kernels.ErrTensorArg, `tensor "tensor" given twice (under an alias)`},
		{"required attribute", sel, []string{"input", "index"}, nil, kernels.ErrAttr, `missing attribute "dim"`},
		{"required given", sel, []string{"input", "index"}, map[string]any{"dim": 0}, nil, ""},
	} {
		err := tc.op.CheckArgs(tc.tensors, tc.attrs)
		if tc.want == nil {
			assert.NoError(t, err, tc.name)
			continue
		}
		if assert.Error(t, err, tc.name) {
			assert.True(t, errors.Is(err, tc.want), "%s: %v", tc.name, err)
			assert.Contains(t, err.Error(), tc.text, tc.name)
		}
	}

	// A run binds as CheckArgs checks: the alias's tensor is the
	// argument's, and an attribute given is the one used, not its default.
	labels := kernels.MustNew(kernels.Int64, 3)
	for i := int64(0); i < 3; i++ {
		labels.StoreInt(i, i)
	}
	res, err := oneHot.Run(kernels.ModeCPU, map[string]*kernels.Tensor{"input": labels}, map[string]any{"num_classes": 5})
	require.NoError(t, err)
	require.Nil(t, res.Failure)
	assert.Equal(t, []int64{3, 5}, res.Outputs["output"].Shape)
	_, err = oneHot.Run(kernels.ModeCPU, map[string]*kernels.Tensor{"input": labels, "tensor": labels}, nil)
	assert.ErrorIs(t, err, kernels.ErrTensorArg)
	x := kernels.MustNew(kernels.Float32, 3, 4)
	res, err = ce.Run(kernels.ModeCPU, map[string]*kernels.Tensor{"input": x, "target": labels}, map[string]any{"reduction": "none"})
	require.NoError(t, err)
	require.Nil(t, res.Failure)
	assert.Equal(t, []int64{3}, res.Outputs["output"].Shape, "reduction none: one loss a sample")
}
