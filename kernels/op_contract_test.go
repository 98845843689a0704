package kernels

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestOpMisuses: every misuse an op declares says its class, its contract
// and its fix, names one of the op's tensors if any, and is one definition:
// the ops that share a check share its Misuse (MisuseOf finds it). Package
// signature's TestOpMisuseClasses checks that each is an argument check
// that some case of the op raises.
func TestOpMisuses(t *testing.T) {
	for _, name := range OpNames() {
		op, _ := Lookup(name)
		seen := map[string]bool{}
		for _, m := range op.Misuses {
			assert.NotEmpty(t, m.Class, "%s: a misuse without a class", name)
			assert.False(t, seen[m.Class], "%s: two misuses of class %s", name, m.Class)
			seen[m.Class] = true
			assert.NotEmpty(t, m.Contract, "%s/%s: no contract", name, m.Class)
			assert.NotEmpty(t, m.Fix, "%s/%s: no fix", name, m.Class)
			if m.Tensor != "" {
				assert.Contains(t, op.tensorList(), m.Tensor, "%s/%s: a tensor the op does not take", name, m.Class)
			}
			got, ops := MisuseOf(m.Class)
			assert.Same(t, m, got, "%s/%s: another op declares the check with other words", name, m.Class)
			assert.Contains(t, ops, op)
			assert.Same(t, m, op.MisuseOf(m.Class))
		}
		for _, r := range op.Rules {
			assert.Contains(t, op.tensorList(), r.Tensor, "%s: a rule of a tensor the op does not take", name)
			assert.NotEmpty(t, r.Text, name)
			assert.NotEmpty(t, r.Fix, name)
		}
	}
	m, ops := MisuseOf("no.such_class")
	assert.Nil(t, m)
	assert.Empty(t, ops)
	m, _ = MisuseOf("")
	assert.Nil(t, m)
}

// TestRuleAllIgnored: the class-index losses' rule holds for an integer
// target whose every element is ignore_index (-100 by default, or the one
// given) under reduction 'mean', and for no other; torch gives a NaN loss
// then, which TestAllIgnoredIsNaN checks against the kernels.
func TestRuleAllIgnored(t *testing.T) {
	ce, _ := Lookup("cross_entropy")
	nll, _ := Lookup("nll_loss")
	assert.Equal(t, []*Rule{ruleAllIgnored}, ce.Rules)
	assert.Equal(t, []*Rule{ruleAllIgnored}, nll.Rules)
	assert.Equal(t, []*Rule{ruleAllIgnored}, Rules(), "each rule once")
	for _, tc := range []struct {
		t     *Tensor
		attrs map[string]any
		want  bool
	}{
		{opTensor(Int64, []int64{3}, -100, -100, -100), nil, true},
		{opTensor(Int64, []int64{2, 2}, -100, -100, -100, -100), map[string]any{"reduction": "mean"}, true},
		{opTensor(Int32, []int64{1}, -100), nil, true},
		{opTensor(Int64, []int64{3}, -100, 2, -100), nil, false},
		{opTensor(Int64, []int64{2}, 255, 255), map[string]any{"ignore_index": json.Number("255")}, true},
		{opTensor(Int64, []int64{2}, -100, -100), map[string]any{"ignore_index": json.Number("255")}, false},
		{opTensor(Int64, []int64{2}, -100, -100), map[string]any{"reduction": "sum"}, false},
		{opTensor(Float32, []int64{2}, -100, -100), nil, false},
		{opTensor(Int64, []int64{0}), nil, false},
		{nil, nil, false},
	} {
		how, ok := ruleAllIgnored.Broken(tc.t, tc.attrs)
		assert.Equal(t, tc.want, ok, "%v %v", tc.t, tc.attrs)
		if ok {
			assert.Contains(t, how, "in every element")
		}
	}
}

// TestAllIgnoredIsNaN: what the rule says, the kernels do (and
// TestOpsAgainstTorch compares the kernels with torch): a mean over no
// target is NaN, a sum 0, and nothing raises.
func TestAllIgnoredIsNaN(t *testing.T) {
	for _, name := range []string{"cross_entropy", "nll_loss"} {
		op, _ := Lookup(name)
		input := opTensor(Float32, []int64{2, 3}, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6)
		target := opTensor(Int64, []int64{2}, -100, -100)
		res, err := op.Run(ModeCPU, map[string]*Tensor{"input": input, "target": target}, nil)
		assert.NoError(t, err)
		if assert.Nil(t, res.Failure, name) {
			assert.True(t, res.Outputs["output"].LoadFloat(0) != res.Outputs["output"].LoadFloat(0), "%s: the mean over no target is NaN", name)
		}
		res, err = op.Run(ModeCPU, map[string]*Tensor{"input": input, "target": target}, map[string]any{"reduction": "sum"})
		assert.NoError(t, err)
		if assert.Nil(t, res.Failure, name) {
			assert.Equal(t, 0.0, res.Outputs["output"].LoadFloat(0), name)
		}
	}
}
