// Package privilege decides from the process's capabilities and the
// running kernel whether probekit's work may run, instead of asking for
// uid 0: one table (Table) says which work needs which capability, on
// which kernels; Need checks a request against it before the work
// starts, and Explain names, after the kernel refused, the capability
// the process lacks or the sysctl that may have refused it.
//
// The capabilities are read from the process's effective set
// (capget(2)); the kernel from uname(2); the sysctls from /proc/sys.
// docs/privileges.md is generated from Table and Uses (a test checks
// it).
package privilege
