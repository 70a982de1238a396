// Command ciliumreach answers what pods may reach under Cilium network
// policies, computed by Cilium v1.20.2's own policy repository, ipcache and
// FQDN name manager, offline. e2e/ciliumproof runs it to check every
// per-sandbox policy the fence admits (its package doc says why this is a
// program of its own module).
//
// It reads requests, one JSON object a line, on standard input and writes
// one answer a line, in order, on standard output (package protocol). Each
// request gets a fresh agent state: the baseline and the policy imported,
// the pods' endpoint policies resolved, the DNS answers handed to the name
// manager, then each flow looked up in the source pod's endpoint policy.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"

	"github.com/sandbox-fence/sandbox-fence/e2e/ciliumproof/reach/protocol"
)

var quiet = slog.New(slog.DiscardHandler)

func main() {
	// Each request builds an agent state and drops it: collecting less
	// often saves a fifth of the program's time, for memory it has to spare.
	debug.SetGCPercent(400)
	if err := serve(context.Background(), os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "ciliumreach:", err)
		os.Exit(1)
	}
}

// serve answers requests until in ends, one at a time and in order: one
// process holds one agent state at a time, as Cilium's policy package
// expects (it numbers selectors with a package-level counter that its
// repository's lock guards, lastSelectorId in selectorcache_selector.go). A
// request it cannot decode ends it with an error: the stream would be out
// of step.
func serve(ctx context.Context, in io.Reader, out io.Writer) error {
	dec := json.NewDecoder(bufio.NewReaderSize(in, 1<<20))
	dec.DisallowUnknownFields()
	w := bufio.NewWriterSize(out, 1<<20)
	enc := json.NewEncoder(w)
	for {
		var req protocol.Request
		if err := dec.Decode(&req); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("request: %w", err)
		}
		if err := enc.Encode(answer(ctx, req)); err != nil {
			return err
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
}
