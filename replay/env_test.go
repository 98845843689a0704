package replay

import (
	"slices"
	"testing"
)

func TestDeviceEnv(t *testing.T) {
	for _, tc := range []struct {
		kind     string
		blocking bool
		want     []string
	}{
		{"cuda", true, []string{"CUDA_LAUNCH_BLOCKING=1"}},
		{"NVIDIA", true, []string{"CUDA_LAUNCH_BLOCKING=1"}},
		{"rocm", true, []string{"AMD_SERIALIZE_KERNEL=3", "HIP_LAUNCH_BLOCKING=1"}},
		{"hip", true, []string{"AMD_SERIALIZE_KERNEL=3", "HIP_LAUNCH_BLOCKING=1"}},
		{"cpu", true, nil},
		{"", true, nil},
		{"tpu", true, nil},
		{"cuda", false, nil},
		{"rocm", false, nil},
	} {
		if got := DeviceEnv(tc.kind, tc.blocking); !slices.Equal(got, tc.want) {
			t.Errorf("DeviceEnv(%q, %v) = %q, want %q", tc.kind, tc.blocking, got, tc.want)
		}
	}
}

func TestEnvPython(t *testing.T) {
	if got := PythonEnv(); !slices.Equal(got, []string{"PYTHONUNBUFFERED=1", "PYTHONFAULTHANDLER=1"}) {
		t.Errorf("PythonEnv() = %q", got)
	}
}

func TestEnvVisibleDevices(t *testing.T) {
	if got := VisibleDevicesEnv("cuda", "1"); !slices.Equal(got, []string{"CUDA_VISIBLE_DEVICES=1"}) {
		t.Errorf("cuda: %q", got)
	}
	if got := VisibleDevicesEnv("rocm", "0,1"); !slices.Equal(got, []string{"CUDA_VISIBLE_DEVICES=0,1", "HIP_VISIBLE_DEVICES=0,1"}) {
		t.Errorf("rocm: %q", got)
	}
	if got := VisibleDevicesEnv("cuda", ""); got != nil {
		t.Errorf("none: %q", got)
	}
}

func TestEnvParseGPUs(t *testing.T) {
	for in, want := range map[string][]string{
		"":           nil,
		"  ":         nil,
		"0":          {"0"},
		"0,1":        {"0", "1"},
		" 2 , 3 ":    {"2", "3"},
		"GPU-ab12,1": {"GPU-ab12", "1"},
	} {
		got, err := ParseGPUs(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("ParseGPUs(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"0,,1", ",", "0,", "a b", "x=1"} {
		if got, err := ParseGPUs(in); err == nil {
			t.Errorf("ParseGPUs(%q) = %q, want an error", in, got)
		}
	}
}

func TestEnvMergeAndFilter(t *testing.T) {
	base := []string{"A=1", "B=2", "PYTHONINSPECT=1", "bad", "=x", "C=3", "FORCE_COLOR=1"}
	if got := FilterEnv(base); !slices.Equal(got, []string{"A=1", "B=2", "C=3"}) {
		t.Errorf("FilterEnv = %q", got)
	}
	got := MergeEnv([]string{"A=1", "B=2", "A=0"}, []string{"B=3", "D=4", "bad"}, nil, []string{"D=5", "E="})
	if want := []string{"A=0", "B=3", "D=5", "E="}; !slices.Equal(got, want) {
		t.Errorf("MergeEnv = %q, want %q", got, want)
	}
	in := []string{"A=1"}
	MergeEnv(in, []string{"A=2"})
	if in[0] != "A=1" {
		t.Errorf("MergeEnv modified its argument")
	}
}
