package kernels

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
)

// Tensor is a strided view over a storage, as in PyTorch: element
// idx (one index per dim) lives at storage element
// Offset + Σ idx[d]·Strides[d], and storage element e occupies bytes
// [e·size, (e+1)·size) of Data, little-endian.
//
// Strides and Offset count elements, not bytes. A stride of 0 is an expanded
// dim; strides that make elements overlap are allowed, as in PyTorch. Negative
// strides and offsets are not (torch.as_strided rejects them too).
type Tensor struct {
	DType   DType   `json:"dtype"`
	Shape   []int64 `json:"shape"`
	Strides []int64 `json:"strides"`
	Offset  int64   `json:"offset"`
	Data    []byte  `json:"-"`
}

// Errors returned by Validate, wrapped with the detail.
var (
	ErrDType    = errors.New("invalid dtype")
	ErrShape    = errors.New("invalid shape")
	ErrStrides  = errors.New("invalid strides")
	ErrOffset   = errors.New("invalid storage offset")
	ErrStorage  = errors.New("view reaches outside its storage")
	ErrOverflow = errors.New("size arithmetic overflows")
	ErrIndex    = errors.New("index out of range")
)

// MaxDims bounds the rank; PyTorch's own limit for CUDA kernels is 25 dims.
const MaxDims = 64

// ContiguousStrides returns the row-major strides of shape, as torch lays
// out a new tensor (a dim of size 0 or 1 counts as 1). Only an empty shape
// can have sizes whose product passes int64; its outer strides then
// saturate at math.MaxInt64 rather than wrap negative (they address nothing).
func ContiguousStrides(shape []int64) []int64 {
	st := make([]int64, len(shape))
	acc := int64(1)
	for d := len(shape) - 1; d >= 0; d-- {
		st[d] = acc
		if shape[d] > 1 {
			var ok bool
			if acc, ok = mulOK(acc, shape[d]); !ok {
				acc = math.MaxInt64
			}
		}
	}
	return st
}

// New returns a zero-filled contiguous tensor.
func New(dt DType, shape ...int64) (*Tensor, error) {
	t := &Tensor{DType: dt, Shape: append([]int64(nil), shape...), Strides: ContiguousStrides(shape)}
	n, err := checkedNumel(shape)
	if err != nil {
		return nil, err
	}
	if !dt.Valid() {
		return nil, fmt.Errorf("%w: %d", ErrDType, dt)
	}
	size, ok := mulOK(n, int64(dt.Size()))
	if !ok || size > math.MaxInt {
		return nil, fmt.Errorf("%w: %d elements of %s", ErrOverflow, n, dt)
	}
	t.Data = make([]byte, size)
	return t, nil
}

// MustNew is New for shapes known to be valid (tests, built-in examples).
func MustNew(dt DType, shape ...int64) *Tensor {
	t, err := New(dt, shape...)
	if err != nil {
		panic(err)
	}
	return t
}

func mulOK(a, b int64) (int64, bool) {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > math.MaxInt64 {
		return 0, false
	}
	return int64(lo), true
}

func addOK(a, b int64) (int64, bool) {
	s := a + b
	if s < a {
		return 0, false
	}
	return s, true
}

func checkedNumel(shape []int64) (int64, error) {
	if len(shape) > MaxDims {
		return 0, fmt.Errorf("%w: %d dims (at most %d)", ErrShape, len(shape), MaxDims)
	}
	n := int64(1)
	for d, s := range shape {
		if s < 0 {
			return 0, fmt.Errorf("%w: dim %d has negative size %d", ErrShape, d, s)
		}
		var ok bool
		if n, ok = mulOK(n, s); !ok {
			return 0, fmt.Errorf("%w: number of elements of shape %v", ErrOverflow, shape)
		}
	}
	return n, nil
}

// Numel is the number of elements of the view.
func (t *Tensor) Numel() int64 {
	n := int64(1)
	for _, s := range t.Shape {
		n *= s
	}
	return n
}

// Dims is the rank.
func (t *Tensor) Dims() int { return len(t.Shape) }

// Extent is the number of storage elements from Offset through the last
// element the view reaches: 1 + Σ (size-1)·stride, or 0 for an empty view.
// It assumes t is valid.
func (t *Tensor) Extent() int64 {
	e, _ := extent(t.Shape, t.Strides)
	return e
}

func extent(shape, strides []int64) (int64, error) {
	e := int64(1)
	for d := range shape {
		if shape[d] == 0 {
			return 0, nil
		}
	}
	for d := range shape {
		span, ok := mulOK(shape[d]-1, strides[d])
		if !ok {
			return 0, fmt.Errorf("%w: dim %d spans %d×%d elements", ErrOverflow, d, shape[d]-1, strides[d])
		}
		if e, ok = addOK(e, span); !ok {
			return 0, fmt.Errorf("%w: view extent", ErrOverflow)
		}
	}
	return e, nil
}

// StorageElems is the number of whole elements Data holds.
func (t *Tensor) StorageElems() int64 {
	if !t.DType.Valid() {
		return 0
	}
	return int64(len(t.Data) / t.DType.Size())
}

// Validate checks that the view is well formed and lies inside its storage.
// It never panics, whatever the fields hold.
func (t *Tensor) Validate() error {
	if !t.DType.Valid() {
		return fmt.Errorf("%w: %d", ErrDType, t.DType)
	}
	return t.validateIn(t.StorageElems())
}

// validateIn is Validate for a storage of have elements, whatever Data
// holds (a layout without its data: SelectLayout).
func (t *Tensor) validateIn(have int64) error {
	if !t.DType.Valid() {
		return fmt.Errorf("%w: %d", ErrDType, t.DType)
	}
	if _, err := checkedNumel(t.Shape); err != nil {
		return err
	}
	if len(t.Strides) != len(t.Shape) {
		return fmt.Errorf("%w: %d strides for %d dims", ErrStrides, len(t.Strides), len(t.Shape))
	}
	for d, s := range t.Strides {
		if s < 0 {
			return fmt.Errorf("%w: dim %d has negative stride %d", ErrStrides, d, s)
		}
	}
	if t.Offset < 0 {
		return fmt.Errorf("%w: %d is negative", ErrOffset, t.Offset)
	}
	ext, err := extent(t.Shape, t.Strides)
	if err != nil {
		return err
	}
	if ext == 0 {
		return nil
	}
	end, ok := addOK(t.Offset, ext)
	if !ok {
		return fmt.Errorf("%w: offset %d + extent %d", ErrOverflow, t.Offset, ext)
	}
	if end > have {
		return fmt.Errorf("%w: needs %d elements of %s (offset %d + extent %d), storage has %d (%d bytes)",
			ErrStorage, end, t.DType, t.Offset, ext, have, len(t.Data))
	}
	return nil
}

// StorageIndex maps a multi-index to its storage element.
func (t *Tensor) StorageIndex(idx []int64) (int64, error) {
	if len(idx) != len(t.Shape) {
		return 0, fmt.Errorf("%w: %d indices for %d dims", ErrIndex, len(idx), len(t.Shape))
	}
	e := t.Offset
	for d, i := range idx {
		if i < 0 || i >= t.Shape[d] {
			return 0, fmt.Errorf("%w: index %d for dim %d of size %d", ErrIndex, i, d, t.Shape[d])
		}
		e += i * t.Strides[d]
	}
	return e, nil
}

// Float reads the element at idx as a float64 (bool is 0 or 1).
func (t *Tensor) Float(idx ...int64) (float64, error) {
	e, err := t.StorageIndex(idx)
	if err != nil {
		return 0, err
	}
	return t.LoadFloat(e), nil
}

// Int reads the element at idx as an int64; floats are truncated toward zero.
func (t *Tensor) Int(idx ...int64) (int64, error) {
	e, err := t.StorageIndex(idx)
	if err != nil {
		return 0, err
	}
	return t.LoadInt(e), nil
}

// SetFloat writes v at idx, converting as torch's copy_ does.
func (t *Tensor) SetFloat(v float64, idx ...int64) error {
	e, err := t.StorageIndex(idx)
	if err != nil {
		return err
	}
	t.StoreFloat(e, v)
	return nil
}

// SetInt writes v at idx.
func (t *Tensor) SetInt(v int64, idx ...int64) error {
	e, err := t.StorageIndex(idx)
	if err != nil {
		return err
	}
	t.StoreInt(e, v)
	return nil
}

// LoadFloat reads storage element e. The caller guarantees e is in range.
func (t *Tensor) LoadFloat(e int64) float64 {
	b := t.Data[e*int64(t.DType.Size()):]
	switch t.DType {
	case Float16:
		return float64(halfToFloat32(binary.LittleEndian.Uint16(b)))
	case BFloat16:
		return float64(bfloat16ToFloat32(binary.LittleEndian.Uint16(b)))
	case Float32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
	case Float64:
		return math.Float64frombits(binary.LittleEndian.Uint64(b))
	default:
		return float64(t.LoadInt(e))
	}
}

// LoadInt reads storage element e as an integer. The caller guarantees e is in range.
func (t *Tensor) LoadInt(e int64) int64 {
	b := t.Data[e*int64(t.DType.Size()):]
	switch t.DType {
	case Bool:
		if b[0] != 0 {
			return 1
		}
		return 0
	case Uint8:
		return int64(b[0])
	case Int8:
		return int64(int8(b[0]))
	case Int16:
		return int64(int16(binary.LittleEndian.Uint16(b)))
	case Int32:
		return int64(int32(binary.LittleEndian.Uint32(b)))
	case Int64:
		return int64(binary.LittleEndian.Uint64(b))
	default:
		return int64(t.LoadFloat(e))
	}
}

// StoreFloat writes v to storage element e.
func (t *Tensor) StoreFloat(e int64, v float64) {
	b := t.Data[e*int64(t.DType.Size()):]
	switch t.DType {
	case Float16:
		binary.LittleEndian.PutUint16(b, float32ToHalf(float32(v)))
	case BFloat16:
		binary.LittleEndian.PutUint16(b, float32ToBFloat16(float32(v)))
	case Float32:
		binary.LittleEndian.PutUint32(b, math.Float32bits(float32(v)))
	case Float64:
		binary.LittleEndian.PutUint64(b, math.Float64bits(v))
	case Bool:
		if v != 0 {
			b[0] = 1
		} else {
			b[0] = 0
		}
	default:
		t.StoreInt(e, int64(v))
	}
}

// StoreInt writes v to storage element e, wrapping as a C cast does. Float
// dtypes round v once, as static_cast<float>(int64_t) does (half and
// bfloat16 then round that float, as c10's constructors do); going through
// float64 first would round twice and differ from torch above 2^53.
func (t *Tensor) StoreInt(e int64, v int64) {
	b := t.Data[e*int64(t.DType.Size()):]
	switch t.DType {
	case Float16:
		binary.LittleEndian.PutUint16(b, float32ToHalf(float32(v)))
	case BFloat16:
		binary.LittleEndian.PutUint16(b, float32ToBFloat16(float32(v)))
	case Float32:
		binary.LittleEndian.PutUint32(b, math.Float32bits(float32(v)))
	case Bool:
		if v != 0 {
			b[0] = 1
		} else {
			b[0] = 0
		}
	case Uint8, Int8:
		b[0] = byte(v)
	case Int16:
		binary.LittleEndian.PutUint16(b, uint16(v))
	case Int32:
		binary.LittleEndian.PutUint32(b, uint32(v))
	case Int64:
		binary.LittleEndian.PutUint64(b, uint64(v))
	default:
		t.StoreFloat(e, float64(v))
	}
}

// Clone returns a deep copy with the same layout and storage.
func (t *Tensor) Clone() *Tensor {
	return &Tensor{
		DType:   t.DType,
		Shape:   append([]int64(nil), t.Shape...),
		Strides: append([]int64(nil), t.Strides...),
		Offset:  t.Offset,
		Data:    append([]byte(nil), t.Data...),
	}
}

// Each calls fn for every multi-index of the view in row-major order, with
// the storage element it maps to. idx is reused between calls.
func (t *Tensor) Each(fn func(idx []int64, e int64)) {
	n := t.Numel()
	if n == 0 {
		return
	}
	idx := make([]int64, len(t.Shape))
	e := t.Offset
	for {
		fn(idx, e)
		d := len(idx) - 1
		for ; d >= 0; d-- {
			idx[d]++
			e += t.Strides[d]
			if idx[d] < t.Shape[d] {
				break
			}
			e -= idx[d] * t.Strides[d]
			idx[d] = 0
		}
		if d < 0 {
			return
		}
	}
}
