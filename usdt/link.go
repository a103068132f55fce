package usdt

import "github.com/probekit/probekit/attach"

// Link is an attached USDT probe: the uprobe links of its locations, and
// the spec map slots, IP map entries and user-space semaphore counts they
// hold. Close releases all of them. It is the link type of package uprobe
// too.
type Link = attach.Link

// Site is one location a Link attached to: Path is the file as the caller
// named it (or as the process maps it), Probe "USDT provider:name".
type Site = attach.Site
