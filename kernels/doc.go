// Package kernels owns the tensor model of reduce: a Tensor is a strided view
// over a byte storage with PyTorch's semantics (element idx lives at storage
// element Offset + Σ idx[d]·Strides[d]; stride 0 expands a dim; views may
// overlap), the dtypes PyTorch records and their conversions, element access,
// PyTorch's layout predicates (is_contiguous, channels_last) and the
// layout-preserving edits the shrinker builds candidates with: Select (keep a
// subset of the slices along a dim), Replace (swap one slice for another) and
// SetElements.
//
// It also owns the built-in ops (cross_entropy, nll_loss, embedding, ...),
// each run in torch 1.13's CPU or CUDA mode with PyTorch's contract for its
// inputs and its exact error texts. An op is defined once: its register
// call carries its arguments and defaults, its run function, its device
// memory plan, the Python frames its errors pass through, the value a
// dropped element takes (Op.Neutral), the advice for its range check
// (Op.Advice), on each check that raises, the class of the failure
// (Site.Class, Failure.Class), and what its argument checks and documented
// rules say to a person (Op.Misuses: the contract and the fix, shared by
// the ops that raise one check; Op.Rules: a batch of valid values that
// breaks one as a whole). Callers ask the Op (Lookup) instead of
// switching on its name; docs/ARCHITECTURE.md says what else a new op
// needs (its Python call, its test cases).
//
// Speed: the ops and the copies run at memory speed on the common layouts
// (fast.go: a dtype switch per run of elements, not per element; copyPlan
// moves bytes; rows split across goroutines where each writes its own
// output; cross_entropy, nll_loss, contiguous binary_cross_entropy, gather
// and index_select read the batch in place and build no buffer as large as
// it: cross_entropy's log-softmax is computed a row at a time, classRows),
// and compute what the general element-by-element paths compute,
// in the same order, bit for bit: the general paths stay for the layouts
// no fast path covers, and generalOnly forces them for the tests that
// compare the two (fast_test.go).
//
// The central promise is layout preservation: a tensor built from a subset of
// another's samples keeps its dtype, its stride order, its padding between
// rows and its storage offset, so that PyTorch, handed the candidate through
// as_strided, answers is_contiguous() and
// is_contiguous(memory_format=torch.channels_last) as it did for the original
// and takes the same kernel paths.
//
// The package is a leaf: it must never import other packages of this project
// (not even the signature package whose class ids its failures carry: a
// test in internal/signature keeps the two in step) and never does I/O
// (files, network, environment, logging, processes); internal/archtest
// checks both. Everything it
// returns is a value or a wrapped sentinel error (ErrIndex, ErrStorage, ...),
// so callers decide what to print. Functions never panic on a tensor that
// passed Validate, and entry points that take tensors from outside validate
// them first.
package kernels
