// Package childproc runs the project's service binaries as child processes,
// for the end-to-end test, the demo and the chaos harness: started with extra environment,
// logging to a file, ready once they print "listening on ADDR", and killed
// (SIGKILL) or stopped (SIGTERM) on demand.
package childproc

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Process is one child process, which can be started again after it died.
type Process struct {
	Name string
	Bin  string
	Args []string
	Env  []string // added to this process's environment
	Dir  string   // the working directory; "" for this process's
	Log  string   // the child's stderr is appended here

	starting sync.Mutex // one Start at a time
	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{} // closed when cmd has been waited for
	addr     string
}

// ErrRunning is returned by Start when the process is already running.
var ErrRunning = errors.New("childproc: already running")

// Start runs the process and waits up to timeout for its "listening on"
// line. Starts of one Process are serialised; starting a running one is
// ErrRunning.
func (p *Process) Start(timeout time.Duration) error {
	p.starting.Lock()
	defer p.starting.Unlock()
	if p.Running() {
		return ErrRunning
	}
	logf, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.Bin, p.Args...)
	cmd.Env = append(os.Environ(), p.Env...)
	cmd.Dir = p.Dir
	cmd.Stderr = logf
	// If the harness dies, its children die too instead of lingering.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("%s: %w", p.Name, err)
	}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "listening on "); ok {
				ready <- a
			}
		}
	}()
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); logf.Close(); close(exited) }()
	select {
	case a := <-ready:
		p.mu.Lock()
		p.cmd, p.exited, p.addr = cmd, exited, a
		p.mu.Unlock()
		return nil
	case <-exited:
		return fmt.Errorf("%s exited during startup (%v); see %s", p.Name, waitErr, p.Log)
	case <-time.After(timeout):
		cmd.Process.Kill()
		<-exited
		return fmt.Errorf("%s did not start within %v; see %s", p.Name, timeout, p.Log)
	}
}

// Addr is the address the running process printed.
func (p *Process) Addr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.addr
}

// Pid is the running process's id, 0 when it is not running.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Running reports whether the process was started and not killed or stopped.
func (p *Process) Running() bool { return p.Pid() != 0 }

// take detaches the running command, if any.
func (p *Process) take() (*exec.Cmd, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	cmd, exited := p.cmd, p.exited
	p.cmd, p.exited = nil, nil
	return cmd, exited
}

// Kill sends SIGKILL and waits until the process is gone.
func (p *Process) Kill() {
	if cmd, exited := p.take(); cmd != nil {
		cmd.Process.Kill()
		<-exited
	}
}

// Stop sends SIGTERM, waits up to 10s for a graceful exit, then kills.
func (p *Process) Stop() {
	if cmd, exited := p.take(); cmd != nil {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	}
}
