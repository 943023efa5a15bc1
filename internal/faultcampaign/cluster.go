package faultcampaign

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Proc is one process of the campaign's cluster: a Consul agent, MinIO, a
// master or a tablet server. Restart starts it again with the same
// arguments — the same listen addresses and data directory — so that
// clients and peers find it where it was.
type Proc struct {
	Name    string // "consul", "minio", "master-1", "tabletserver-2"
	Role    string // "consul", "minio", "master", "tabletserver"
	Addr    string // gRPC (roles) or HTTP (Consul, MinIO) address
	HTTP    string // a role's --http address
	LogPath string

	bin  string
	args []string
	env  []string

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	paused bool
	// held: the nemesis stopped the process on purpose and restarts it
	// itself; the supervisor leaves it alone.
	held atomic.Bool
}

// Alive reports whether the process runs (paused counts as running).
func (p *Proc) Alive() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Pid is the process id, 0 when not running.
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// start launches the process and waits until ready reports it serves.
func (p *Proc) start(ctx context.Context, ready func(ctx context.Context, stdout <-chan string) error) error {
	logFile, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logFile, "\n=== %s start %s\n", time.Now().UTC().Format(time.RFC3339Nano), strings.Join(p.args, " "))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = p.env
	cmd.Stderr = logFile
	out, err := cmd.StdoutPipe()
	if err != nil {
		logFile.Close()
		return err
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			fmt.Fprintln(logFile, sc.Text())
			select {
			case lines <- sc.Text():
			default:
			}
		}
		_, _ = io.Copy(logFile, out)
	}()
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		time.Sleep(50 * time.Millisecond) // let the stdout copier finish
		logFile.Close()
		close(done)
	}()
	p.mu.Lock()
	p.cmd, p.done, p.paused = cmd, done, false
	p.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- ready(rctx, lines) }()
	select {
	case err := <-errc:
		if err != nil {
			return fmt.Errorf("%s not ready: %w\n%s", p.Name, err, tailFile(p.LogPath, 3000))
		}
		return nil
	case <-done:
		return fmt.Errorf("%s exited before ready\n%s", p.Name, tailFile(p.LogPath, 3000))
	}
}

// Signal sends sig to the process (SIGSTOP and SIGCONT are tracked).
func (p *Proc) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return fmt.Errorf("%s: not started", p.Name)
	}
	switch sig {
	case syscall.SIGSTOP:
		p.paused = true
	case syscall.SIGCONT:
		p.paused = false
	}
	return p.cmd.Process.Signal(sig)
}

// Kill sends sig (SIGKILL or SIGTERM) and waits for the process to end,
// continuing it first if it was paused.
func (p *Proc) Kill(sig syscall.Signal) {
	p.mu.Lock()
	cmd, done, paused := p.cmd, p.done, p.paused
	p.mu.Unlock()
	if cmd == nil || done == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	if paused {
		_ = cmd.Process.Signal(syscall.SIGCONT)
	}
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
	}
}

// Cluster is the campaign's cluster on loopback: its own Consul agent (a
// one-node server with a data directory, so that a restart keeps the
// state) and MinIO server, which the nemesis pauses and restarts, two or
// more masters and three or more tablet servers of the tabula binary.
type Cluster struct {
	Dir     string
	Name    string // the Consul prefix and bucket suffix
	Consul  *Proc
	MinIO   *Proc
	Masters []*Proc
	Servers []*Proc
	Store   string // the --store URL

	bin, consulBin, minioBin string
	env                      []string
	minioUser, minioPass     string
}

// ClusterConfig sizes a Cluster.
type ClusterConfig struct {
	Dir                     string // logs and data; required
	TabulaBin               string // the tabula binary; required
	ConsulBin, MinIOBin     string // required
	Masters, Servers        int
	SplitSize, MemtableSize int64
	// MetadataSplitSize is the tablet servers' --metadata-split-size (0:
	// their default).
	MetadataSplitSize int64
	Log               func(format string, args ...any)
}

// handedOut are the ports freePort returned in this process.
var handedOut struct {
	sync.Mutex
	ports map[int]bool
}

// freePort returns a port that was free on 127.0.0.1 a moment ago, below
// the kernel's ephemeral range, and never one it returned before in this
// process.
//
// Below the ephemeral range because the campaign's processes keep their
// ports for life: a killed server is restarted on its address, and Consul
// and MinIO start a moment after their ports are chosen. A port in the
// ephemeral range can meanwhile be taken by any process's outgoing
// connection or port-0 listener — a clean-clone CI run lost Consul's HTTP
// port that way (session 31), as another test package ran beside it. The
// kernel never hands out ports below the range on its own, so only an
// explicit bind can collide there. Never twice because two checks in turn
// can see the same port free, and a tablet server given it for both
// --addr and --http could not start (session 12).
func freePort() (int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports == nil {
		handedOut.ports = map[int]bool{}
	}
	low, high := belowEphemeralRange()
	for range 1000 {
		p := low + mrand.IntN(high-low)
		if handedOut.ports[p] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue // in use
		}
		l.Close()
		handedOut.ports[p] = true
		return p, nil
	}
	return 0, fmt.Errorf("faultcampaign: no free port in [%d, %d) in 1000 tries", low, high)
}

// belowEphemeralRange is the range freePort draws from: the 12,000 ports
// under the first port of Linux's ip_local_port_range (32768 when the
// file cannot be read, the Linux default), and never the privileged ones.
func belowEphemeralRange() (low, high int) {
	high = 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		var first, last int
		if n, _ := fmt.Sscan(string(b), &first, &last); n == 2 && first > 2048 {
			high = first
		}
	}
	low = max(high-12000, 1024)
	return low, high
}

func freeAddr() (string, error) {
	p, err := freePort()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("127.0.0.1:%d", p), nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// StartCluster starts Consul, MinIO, the masters and the servers, and
// waits for each to be ready. Close stops them.
func StartCluster(ctx context.Context, cfg ClusterConfig) (*Cluster, error) {
	c := &Cluster{Dir: cfg.Dir, Name: "c" + randomHex(5), bin: cfg.TabulaBin, consulBin: cfg.ConsulBin, minioBin: cfg.MinIOBin}
	ok := false
	defer func() {
		if !ok {
			c.Close()
		}
	}()
	if err := c.startConsul(ctx); err != nil {
		return nil, err
	}
	user, pass := "campaign"+randomHex(3), randomHex(16)
	c.minioUser, c.minioPass = user, pass
	if err := c.startMinIO(ctx, user, pass); err != nil {
		return nil, err
	}
	c.env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+user, "AWS_SECRET_ACCESS_KEY="+pass)
	c.Store = fmt.Sprintf("s3://tabula-%s?endpoint=%s&secure=false", c.Name, c.MinIO.Addr)
	for i := range cfg.Masters {
		args := []string{"--gc-interval", "5s", "--gc-grace", "2m"}
		if cfg.SplitSize > 0 {
			args = append(args, "--split-size", fmt.Sprint(cfg.SplitSize))
		}
		p, err := c.newRole(fmt.Sprintf("master-%d", i+1), "master", args)
		if err != nil {
			return nil, err
		}
		if err := c.startRole(ctx, p); err != nil {
			return nil, err
		}
		c.Masters = append(c.Masters, p)
	}
	for i := range cfg.Servers {
		// Below the master's 2 min --gc-grace: a flush or compaction
		// slowed past it (MinIO paused) rewrites its file instead of
		// saving a state that names a file GC may have collected.
		args := []string{"--file-commit-window", "1m"}
		if cfg.SplitSize > 0 {
			args = append(args, "--split-size", fmt.Sprint(cfg.SplitSize))
		}
		if cfg.MemtableSize > 0 {
			args = append(args, "--memtable-size", fmt.Sprint(cfg.MemtableSize))
		}
		if cfg.MetadataSplitSize > 0 {
			args = append(args, "--metadata-split-size", fmt.Sprint(cfg.MetadataSplitSize))
		}
		p, err := c.newRole(fmt.Sprintf("tabletserver-%d", i+1), "tabletserver", args)
		if err != nil {
			return nil, err
		}
		if err := c.startRole(ctx, p); err != nil {
			return nil, err
		}
		c.Servers = append(c.Servers, p)
	}
	ok = true
	return c, nil
}

func (c *Cluster) startConsul(ctx context.Context) error {
	var ports [4]int
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return err
		}
		ports[i] = p
	}
	data := filepath.Join(c.Dir, "consul-data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return err
	}
	p := &Proc{Name: "consul", Role: "consul", Addr: fmt.Sprintf("127.0.0.1:%d", ports[0]),
		LogPath: filepath.Join(c.Dir, "consul.log"), bin: c.consulBin, env: append(os.Environ(), "CHECKPOINT_DISABLE=1"),
		// A one-node server with state on disk (not -dev): a restart
		// keeps the cluster's keys and sessions.
		args: []string{"agent", "-server", "-bootstrap-expect", "1", "-node", "campaign",
			"-bind", "127.0.0.1", "-client", "127.0.0.1", "-advertise", "127.0.0.1",
			"-http-port", fmt.Sprint(ports[0]), "-dns-port", "-1", "-grpc-port", "-1", "-grpc-tls-port", "-1",
			"-serf-lan-port", fmt.Sprint(ports[1]), "-serf-wan-port", fmt.Sprint(ports[2]), "-server-port", fmt.Sprint(ports[3]),
			"-data-dir", data, "-hcl", "performance { raft_multiplier = 1 }"}}
	c.Consul = p
	return c.startConsulProc(ctx)
}

// startConsulProc starts (or restarts) the agent and waits for a leader.
func (c *Cluster) startConsulProc(ctx context.Context) error {
	p := c.Consul
	return p.start(ctx, func(ctx context.Context, _ <-chan string) error {
		return poll(ctx, func() error {
			resp, err := http.Get("http://" + p.Addr + "/v1/status/leader")
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			var leader string
			if err := json.NewDecoder(resp.Body).Decode(&leader); err != nil {
				return err
			}
			if leader == "" {
				return errors.New("no leader yet")
			}
			return nil
		})
	})
}

func (c *Cluster) startMinIO(ctx context.Context, user, pass string) error {
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	console, err := freeAddr()
	if err != nil {
		return err
	}
	data := filepath.Join(c.Dir, "minio-data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return err
	}
	c.MinIO = &Proc{Name: "minio", Role: "minio", Addr: addr, LogPath: filepath.Join(c.Dir, "minio.log"), bin: c.minioBin,
		env:  append(os.Environ(), "MINIO_ROOT_USER="+user, "MINIO_ROOT_PASSWORD="+pass, "MINIO_CI_CD=1", "MINIO_BROWSER=off", "MINIO_UPDATE=off"),
		args: []string{"server", "--quiet", "--address", addr, "--console-address", console, data}}
	return c.startMinIOProc(ctx)
}

func (c *Cluster) startMinIOProc(ctx context.Context) error {
	p := c.MinIO
	return p.start(ctx, func(ctx context.Context, _ <-chan string) error {
		return poll(ctx, func() error {
			resp, err := http.Get("http://" + p.Addr + "/minio/health/live")
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return errors.New(resp.Status)
			}
			return nil
		})
	})
}

// newRole prepares a master or tablet server on fixed free addresses.
func (c *Cluster) newRole(name, role string, extra []string) (*Proc, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	httpAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	args := append([]string{role, "--consul", c.Consul.Addr, "--cluster", c.Name, "--store", c.Store,
		"--addr", addr, "--http", httpAddr, "--log-format", "text", "--session-ttl", "10s", "--lock-delay", "1s"}, extra...)
	return &Proc{Name: name, Role: role, Addr: addr, HTTP: httpAddr, LogPath: filepath.Join(c.Dir, name+".log"),
		bin: c.bin, env: c.env, args: args}, nil
}

// startRole starts (or restarts) a master or tablet server and waits for
// its "ready" line.
func (c *Cluster) startRole(ctx context.Context, p *Proc) error {
	return p.start(ctx, func(ctx context.Context, lines <-chan string) error {
		for {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case l := <-lines:
				if f := strings.Fields(l); len(f) == 2 && f[0] == "ready" {
					return nil
				}
			}
		}
	})
}

// Restart starts p again after it ended (kill -9, SIGTERM).
func (c *Cluster) Restart(ctx context.Context, p *Proc) error {
	var err error
	for attempt := 0; attempt < 5; attempt++ { // the port may linger a moment
		switch p.Role {
		case "consul":
			err = c.startConsulProc(ctx)
		case "minio":
			err = c.startMinIOProc(ctx)
		default:
			err = c.startRole(ctx, p)
		}
		if err == nil || !strings.Contains(err.Error(), "address already in use") {
			return err
		}
		time.Sleep(time.Second)
	}
	return err
}

// Supervise restarts, until ctx ends, every master or tablet server that
// ended by itself (a server stops when its lease lapses or its commit log
// fails, as a supervisor such as systemd would), calling restarted for
// each.
func (c *Cluster) Supervise(ctx context.Context, restarted func(p *Proc, err error)) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
		for _, p := range append(append([]*Proc(nil), c.Masters...), c.Servers...) {
			if p.held.Load() || p.Alive() {
				continue
			}
			restarted(p, c.Restart(ctx, p))
		}
	}
}

// ActiveMaster returns the master whose /status says it is active, nil if
// none answers so.
func (c *Cluster) ActiveMaster() *Proc {
	for _, m := range c.Masters {
		if !m.Alive() {
			continue
		}
		var st struct{ Active bool }
		if err := getJSON(m.HTTP+"/status?format=json", &st); err == nil && st.Active {
			return m
		}
	}
	return nil
}

// Close kills every process.
func (c *Cluster) Close() {
	for _, p := range append(append(append([]*Proc(nil), c.Servers...), c.Masters...), c.MinIO, c.Consul) {
		if p != nil && p.Alive() {
			p.Kill(syscall.SIGKILL)
		}
	}
}

var httpClient = &http.Client{Timeout: 2 * time.Second}

func getJSON(hostport string, v any) error {
	resp, err := httpClient.Get("http://" + hostport)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", hostport, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// poll runs f every 100 ms until it succeeds or ctx ends.
func poll(ctx context.Context, f func() error) error {
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func tailFile(path string, n int) string {
	b, _ := os.ReadFile(path)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
