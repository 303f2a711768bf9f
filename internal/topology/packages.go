// Package topology starts the production-shaped PostgreSQL topologies that
// `make topology` runs the payments example on, from Debian's packages and
// on this machine only: a pg_auto_failover formation (a monitor, a primary
// and a synchronous standby, under the "postgres" user when run as root)
// and PgBouncer in transaction pooling mode. Everything lives in a
// directory of the caller's, listens on loopback ports picked free, and
// is stopped by Stop.
package topology

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/idemgen/idemgen/pglocal"
)

// Package is a Debian package the topology needs, and a file that is there
// once it is installed.
type Package struct {
	Name string
	File string
}

// Packages returns the packages for the PostgreSQL major version whose
// server binaries are in binDir (/usr/lib/postgresql/15/bin: 15).
func Packages(binDir string) []Package {
	major := filepath.Base(filepath.Dir(binDir))
	return []Package{
		{Name: "postgresql-" + major + "-auto-failover", File: filepath.Join(filepath.Dir(binDir), "lib", "pgautofailover.so")},
		{Name: "pg-auto-failover-cli", File: "/usr/bin/pg_autoctl"},
		{Name: "pgbouncer", File: "/usr/sbin/pgbouncer"},
	}
}

// Missing returns the names of the packages whose file is absent.
func Missing(pkgs []Package, exists func(string) bool) []string {
	var out []string
	for _, p := range pkgs {
		if !exists(p.File) {
			out = append(out, p.Name)
		}
	}
	return out
}

// InstallLine is the command that installs pkgs.
func InstallLine(pkgs []string) string {
	return "apt-get install -y " + strings.Join(pkgs, " ")
}

// EnsurePackages installs the missing packages when running as root
// (apt-get update, then apt-get install), and otherwise fails with the
// exact line to run. It reports what it did on out.
func EnsurePackages(out io.Writer) error {
	bin, err := pglocal.BinDir()
	if err != nil {
		return err
	}
	missing := Missing(Packages(bin), func(f string) bool { _, err := os.Stat(f); return err == nil })
	if len(missing) == 0 {
		return nil
	}
	line := InstallLine(missing)
	if os.Geteuid() != 0 {
		return fmt.Errorf("topology: missing Debian packages; as root run:\n  apt-get update && %s", line)
	}
	fmt.Fprintf(out, "topology: installing %s\n", strings.Join(missing, ", "))
	for _, args := range [][]string{{"apt-get", "update", "-qq"}, append([]string{"apt-get", "install", "-y", "-qq"}, missing...)} {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		var buf bytes.Buffer
		cmd.Stdout, cmd.Stderr = &buf, &buf
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("topology: %s: %w\n%s", strings.Join(args, " "), err, buf.Bytes())
		}
	}
	if still := Missing(Packages(bin), func(f string) bool { _, err := os.Stat(f); return err == nil }); len(still) > 0 {
		return errors.New("topology: still missing after apt-get install: " + strings.Join(still, ", "))
	}
	return nil
}
