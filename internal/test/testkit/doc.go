// Package testkit holds what probekit's tests share: the kernel-test gate,
// a TestMain that fails a package leaking file descriptors, a driver for
// the fixture programs of testdata/, and a reader of another process's
// memory for semaphore assertions. It is not API.
package testkit
