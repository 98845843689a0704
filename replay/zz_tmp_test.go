package replay

import (
	"bytes"
	"io"
	"testing"
	"time"
)

func TestTmpWorkerInProcess(t *testing.T) {
	data := encodeForTest(t, crossEntropyBatch(t, 1<<20))
	for i := 0; i < 3; i++ {
		s := time.Now()
		var out bytes.Buffer
		code := Worker([]string{"--device", "cpu"}, bytes.NewReader(data), &out, io.Discard, nil)
		t.Logf("code %d in %v: %s", code, time.Since(s), out.String())
	}
}
