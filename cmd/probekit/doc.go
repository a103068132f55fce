// Command probekit lists and traces the USDT probes of programs.
//
//	probekit list [--json] [-p PID] TARGET [GLOB]
//	probekit trace [--json] [-p PID] [-n COUNT] TARGET:PROVIDER:NAME... [-- CMD ARGS...]
package main
