// Package attach is the core both kinds of probe attach through: USDT
// probes (package usdt) and function probes (package uprobe) reduce to
// "these file offsets of this file, with these cookies and semaphore
// offsets", and this package places them.
//
// # One way to attach
//
// Prepare, called on a CollectionSpec before it is loaded, fixes how the
// programs will attach: with one uprobe_multi link per file on kernels
// that have it (Linux 6.6, with the PID-filter fix of commit
// 46ba0e49b642), or with one perf-event uprobe per site otherwise. The
// attach type of a program is set at load time, so the choice cannot wait
// for Attach; but nothing has to be carried from Prepare to Attach either:
// Attach asks the same cached feature probe. A program loaded without
// Prepare on a kernel with uprobe_multi is refused with ErrNotPrepared
// before anything is attached, never attached another way.
//
// # One link
//
// Attach is all-or-nothing: when one site fails, everything attached so
// far is detached and the error names the site. The result is a *Link,
// the type usdt and uprobe both return. Its Close detaches every kernel
// link, then releases what the attachment held (USDT spec ids, IP map
// entries, user-space semaphore counts), joins the errors of every step,
// and is idempotent.
package attach
