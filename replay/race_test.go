//go:build race

package replay

// raceEnabled: this test binary runs under the race detector, whose
// runtime reserves more address space than a test's ulimit -v allows.
const raceEnabled = true
