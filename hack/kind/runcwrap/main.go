// Command runcwrap is the default runtime of the Docker engine that
// hack/kind/engine.sh starts. It runs /usr/sbin/runc with the same
// arguments, after removing from the container's capability lists every
// capability this machine's bounding set lacks.
//
// Why: kind runs its nodes privileged, and a privileged container asks for
// every capability. Some VMs (this project's machines among them) run
// without CAP_SYS_RESOURCE in their bounding set; runc then fails every
// privileged container with "unable to apply caps: operation not
// permitted", and `--cap-drop` does not combine with `--privileged`. Where
// the bounding set is full the wrapper changes nothing.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// runc is Debian's runc, the engine's own runtime.
const runc = "/usr/sbin/runc"

func main() {
	if err := rewrite(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "runcwrap:", err)
		os.Exit(1)
	}
	if err := syscall.Exec(runc, append([]string{runc}, os.Args[1:]...), os.Environ()); err != nil {
		fmt.Fprintln(os.Stderr, "runcwrap: exec", runc+":", err)
		os.Exit(1)
	}
}

// rewrite edits the OCI file the command reads its capabilities from: the
// bundle's config.json for create and run, the --process file for exec.
func rewrite(args []string) error {
	missing, err := missingCaps()
	if err != nil || len(missing) == 0 {
		return err
	}
	cmd, flags := command(args)
	switch cmd {
	case "create", "run":
		bundle := flags["bundle"]
		if bundle == "" {
			bundle = "."
		}
		return editJSON(filepath.Join(bundle, "config.json"), missing, true)
	case "exec":
		if p := flags["process"]; p != "" {
			return editJSON(p, missing, false)
		}
	}
	return nil
}

// command finds the subcommand and the values of --bundle/-b and
// --process/-p, skipping runc's global flags (--root X, --log X, ...).
func command(args []string) (string, map[string]string) {
	flags := map[string]string{}
	cmd := ""
	short := map[string]string{"b": "bundle", "p": "process"}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			if cmd == "" {
				cmd = a
			}
			continue
		}
		name := strings.TrimLeft(a, "-")
		value, hasValue := "", false
		if k, v, ok := strings.Cut(name, "="); ok {
			name, value, hasValue = k, v, true
		}
		if long, ok := short[name]; ok && !strings.HasPrefix(a, "--") {
			name = long
		}
		if !valued(name) {
			continue
		}
		if !hasValue && i+1 < len(args) {
			i++
			value = args[i]
		}
		if cmd != "" {
			flags[name] = value
		}
	}
	return cmd, flags
}

// valued lists the runc flags (global, create/run/exec) that take a value,
// so that their value is not taken for the subcommand.
func valued(name string) bool {
	switch name {
	case "root", "log", "log-format", "criu", "bundle", "process", "console-socket",
		"pid-file", "preserve-fds", "cwd", "env", "user", "additional-gids", "cap",
		"process-label", "apparmor", "cgroup", "rootless":
		return true
	}
	return false
}

// missingCaps names the capabilities (CAP_*) absent from this process's
// bounding set, which no child can gain.
func missingCaps() (map[string]bool, error) {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return nil, err
	}
	var bnd uint64
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "CapBnd:"); ok {
			if bnd, err = strconv.ParseUint(strings.TrimSpace(v), 16, 64); err != nil {
				return nil, fmt.Errorf("CapBnd %q: %w", v, err)
			}
		}
	}
	missing := map[string]bool{}
	for bit, name := range capNames {
		if bnd&(1<<bit) == 0 {
			missing[name] = true
		}
	}
	return missing, nil
}

// capNames are the capabilities of Linux 6.x by bit number.
var capNames = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID",
	"CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE",
	"CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK",
	"CAP_IPC_OWNER", "CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE",
	"CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE", "CAP_SYS_RESOURCE",
	"CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE", "CAP_AUDIT_WRITE",
	"CAP_AUDIT_CONTROL", "CAP_SETFCAP", "CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG",
	"CAP_WAKE_ALARM", "CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF",
	"CAP_CHECKPOINT_RESTORE",
}

// editJSON removes the missing capabilities from every list of the
// capabilities object (under "process" in a bundle's config.json, at the top
// of a --process file). Numbers are kept as written (UseNumber): resource
// limits such as 9223372036854775807 must not go through float64.
func editJSON(path string, missing map[string]bool, underProcess bool) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var doc map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	proc := doc
	if underProcess {
		p, ok := doc["process"].(map[string]any)
		if !ok {
			return nil
		}
		proc = p
	}
	caps, ok := proc["capabilities"].(map[string]any)
	if !ok {
		return nil
	}
	changed := false
	for set, v := range caps {
		list, ok := v.([]any)
		if !ok {
			continue
		}
		kept := list[:0:0]
		for _, c := range list {
			if s, ok := c.(string); ok && missing[s] {
				changed = true
				continue
			}
			kept = append(kept, c)
		}
		caps[set] = kept
	}
	if !changed {
		return nil
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, fi.Mode().Perm())
}
