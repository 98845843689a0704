// Command reduce turns a recorded failing PyTorch batch into the smallest
// input that still triggers the same failure, and writes it as a regression
// fixture. See the package documentation in doc.go and `reduce --help`.
package main

import "os"

func main() {
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}
