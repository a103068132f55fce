package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "probekit: not implemented yet")
	os.Exit(2)
}
