// Package archtest holds no code: its test, TestPackageMap, checks the
// package map of docs/ARCHITECTURE.md on the imports of every package of
// the module, so that a change that crosses a seam fails where it is made.
package archtest
