package kernels

import (
	"fmt"
	"math"

	"github.com/x448/float16"
)

// DType is an element type, named as PyTorch names it (torch.float32 prints
// as "float32"). The zero value is invalid.
type DType uint8

// The dtypes a batch may hold. Their order is part of no contract: files and
// JSON carry the names.
const (
	Bool DType = iota + 1
	Uint8
	Int8
	Int16
	Int32
	Int64
	Float16
	BFloat16
	Float32
	Float64
)

var dtypeNames = [...]string{
	Bool: "bool", Uint8: "uint8", Int8: "int8", Int16: "int16", Int32: "int32",
	Int64: "int64", Float16: "float16", BFloat16: "bfloat16", Float32: "float32",
	Float64: "float64",
}

var dtypeSizes = [...]int{
	Bool: 1, Uint8: 1, Int8: 1, Int16: 2, Int32: 4, Int64: 8,
	Float16: 2, BFloat16: 2, Float32: 4, Float64: 8,
}

// DTypes lists every supported dtype in a fixed order.
func DTypes() []DType {
	return []DType{Bool, Uint8, Int8, Int16, Int32, Int64, Float16, BFloat16, Float32, Float64}
}

// ParseDType maps a PyTorch dtype name to a DType. It accepts the "torch."
// prefix and PyTorch's aliases (long, int, half, float, double, ...).
func ParseDType(name string) (DType, error) {
	switch name {
	case "long", "torch.long":
		return Int64, nil
	case "int", "torch.int":
		return Int32, nil
	case "short", "torch.short":
		return Int16, nil
	case "half", "torch.half":
		return Float16, nil
	case "float", "torch.float":
		return Float32, nil
	case "double", "torch.double":
		return Float64, nil
	}
	if len(name) > 6 && name[:6] == "torch." {
		name = name[6:]
	}
	for d, n := range dtypeNames {
		if n != "" && n == name {
			return DType(d), nil
		}
	}
	return 0, fmt.Errorf("unknown dtype %q (want one of bool, uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64)", name)
}

// Valid reports whether d is one of the supported dtypes.
func (d DType) Valid() bool { return d >= Bool && d <= Float64 }

// String returns PyTorch's name for d.
func (d DType) String() string {
	if !d.Valid() {
		return fmt.Sprintf("dtype(%d)", uint8(d))
	}
	return dtypeNames[d]
}

// Size is the element size in bytes.
func (d DType) Size() int {
	if !d.Valid() {
		return 0
	}
	return dtypeSizes[d]
}

// IsFloat reports whether d is a floating-point dtype.
func (d DType) IsFloat() bool {
	return d == Float16 || d == BFloat16 || d == Float32 || d == Float64
}

// MarshalText writes PyTorch's name, so DTypes read well in JSON.
func (d DType) MarshalText() ([]byte, error) {
	if !d.Valid() {
		return nil, fmt.Errorf("invalid dtype %d", uint8(d))
	}
	return []byte(d.String()), nil
}

// UnmarshalText parses PyTorch's name.
func (d *DType) UnmarshalText(b []byte) error {
	v, err := ParseDType(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// bfloat16 is the upper half of a float32; conversion rounds to nearest even,
// as torch does (c10/util/BFloat16.h round_to_nearest_even), and keeps NaN a NaN.
func float32ToBFloat16(f float32) uint16 {
	if f != f {
		return 0x7fc0
	}
	u := math.Float32bits(f)
	rounding := uint32(0x7fff) + ((u >> 16) & 1)
	return uint16((u + rounding) >> 16)
}

func bfloat16ToFloat32(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }

func float32ToHalf(f float32) uint16 { return float16.Fromfloat32(f).Bits() }

func halfToFloat32(h uint16) float32 { return float16.Frombits(h).Float32() }
