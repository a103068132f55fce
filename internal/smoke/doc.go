// Package smoke holds the kernel smoke test: the proof that this machine
// (and CI) can load a BPF program, attach a uprobe to a fixture function
// and see it fire. When it fails, every other kernel test is moot.
package smoke
