// Command loadgen drives one `staticfleet coordinator serve` with static members'
// heartbeats, for bench/capacity.py (docs/performance.md, "Capacity").
//
// It brings the members in the way real ones join (admin PUT expected-members per group,
// then every member's JoinGroup and SyncGroup over HTTP), then heartbeats them over a fixed
// number of keep-alive connections:
//
//   - steady: each member heartbeats every -interval-ms at its own due time (spread evenly
//     over the interval); latency is measured from the due time, not from the send, so a
//     server (or connection) that falls behind shows in the figures.
//   - full: every connection sends heartbeats back to back; the rate is the server's limit.
//
// -steps grows the fleet in steps (group counts): after each step it measures a window,
// so one run finds the member count at which p99 crosses a bound. The report (JSON on
// stdout) carries each window's rate, latency percentiles, non-NONE answers, and the CPU
// of this process and of the server (-server-pid), so it is visible which side was the limit.
//
// The heartbeat path is a minimal HTTP/1.1 client over raw keep-alive connections
// (pre-encoded requests, the standard library's response parser): net/http's client
// would cost this process more CPU per request than the measurement can spare.
package main

import (
	"bufio"
	"bytes"
	"container/heap"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

type config struct {
	baseURL        string
	tokensFile     string
	groups         int
	members        int
	conns          int
	intervalMs     int
	sessionMs      int
	window         time.Duration
	settle         time.Duration
	mode           string
	steps          []int
	setupParallel  int
	serverPid      int
	groupPrefix    string
	stopAboveP99Ms float64
	burst          int
	burstAddrs     int
	requestsFile   string
	requestsOut    string
	samples        bool
	// fleet mode (fleet.go)
	protocol         string
	bootstrap        string
	rebalanceMembers int
	formationTimeout time.Duration
	startRate        float64
}

type tokens struct {
	Admin   []string            `json:"admin"`
	Members map[string][]string `json:"members"`
}

type member struct {
	group      string
	instanceID string
	memberID   string
	generation int
	request    []byte // the pre-encoded heartbeat request
	due        time.Time
	seq        int
}

// The schedule's origin: every member's due times are epoch + its phase + k * interval.
var epoch = time.Now()

func main() {
	cfg := parseFlags()
	if cfg.mode == "fleet" {
		f, err := runFleet(cfg)
		if err != nil {
			fmt.Fprintln(os.Stderr, "loadgen:", err)
			os.Exit(1)
		}
		out, _ := json.MarshalIndent(f, "", "  ")
		fmt.Println(string(out))
		return
	}
	if cfg.mode == "burst" {
		b, err := burstFromFile(cfg)
		if err != nil {
			fmt.Fprintln(os.Stderr, "loadgen:", err)
			os.Exit(1)
		}
		out, _ := json.MarshalIndent(b, "", "  ")
		fmt.Println(string(out))
		return
	}
	report, err := run(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
	out, _ := json.MarshalIndent(report, "", "  ")
	fmt.Println(string(out))
}

func parseFlags() config {
	var cfg config
	var steps string
	flag.StringVar(&cfg.baseURL, "url", "http://127.0.0.1:9092", "the server")
	flag.StringVar(&cfg.tokensFile, "tokens", "", `tokens file: {"admin": [..], "members": {group: [token]}}`)
	flag.IntVar(&cfg.groups, "groups", 200, "groups (when -steps is not given)")
	flag.IntVar(&cfg.members, "members", 100, "static members per group")
	flag.IntVar(&cfg.conns, "conns", 256, "keep-alive connections for heartbeats")
	flag.IntVar(&cfg.intervalMs, "interval-ms", 3000, "heartbeat interval (steady mode)")
	flag.IntVar(&cfg.sessionMs, "session-ms", 45000, "session timeout the members join with")
	flag.DurationVar(&cfg.window, "window", 30*time.Second, "measurement window per step")
	flag.DurationVar(&cfg.settle, "settle", 6*time.Second, "unmeasured time after each step's setup")
	flag.StringVar(&cfg.mode, "mode", "steady", "steady, full, burst (-burst connections opened at once, no setup) or fleet (fleet.go)")
	flag.IntVar(&cfg.burst, "burst", 5000, "burst mode: connections opened at once, each sending one member's heartbeat")
	flag.IntVar(&cfg.burstAddrs, "burst-addrs", 250, "burst mode: source addresses 127.0.0.2.. the burst spreads over (the server caps connections per address)")
	flag.StringVar(&cfg.requestsFile, "requests", "", "burst mode: the members' heartbeat requests, as written by -requests-out")
	flag.StringVar(&cfg.requestsOut, "requests-out", "", "steady mode: write the members' heartbeat requests here once they are formed")
	flag.BoolVar(&cfg.samples, "samples", false, "report every heartbeat of the window as [due unix ms, latency ms]")
	flag.StringVar(&cfg.protocol, "protocol", "http", "fleet mode: http (our coordinator at -url) or kafka (a broker at -bootstrap)")
	flag.StringVar(&cfg.bootstrap, "bootstrap", "127.0.0.1:9093", "fleet mode, kafka: the broker")
	flag.IntVar(&cfg.rebalanceMembers, "rebalance-members", 1000, "fleet mode: members of the extra group whose full rebalance is timed (0: none)")
	flag.DurationVar(&cfg.formationTimeout, "formation-timeout", 10*time.Minute, "fleet mode: how long formation (and the rebalance) may take")
	flag.Float64Var(&cfg.startRate, "start-rate", 1000, "fleet mode: members started per second (0: all at once)")
	flag.StringVar(&steps, "steps", "", "comma-separated group counts to grow through (default: -groups)")
	flag.IntVar(&cfg.setupParallel, "setup-parallel", 8, "groups joining at once during setup")
	flag.IntVar(&cfg.serverPid, "server-pid", 0, "the server's pid, for its CPU time and RSS")
	flag.StringVar(&cfg.groupPrefix, "group-prefix", "cap-", "group ids are <prefix><index>")
	flag.Float64Var(&cfg.stopAboveP99Ms, "stop-above-p99-ms", 2000, "stop growing once a step's p99 exceeds this")
	flag.Parse()
	if steps == "" {
		cfg.steps = []int{cfg.groups}
	} else {
		for _, part := range strings.Split(steps, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(part))
			if err != nil || n < 1 {
				fmt.Fprintln(os.Stderr, "loadgen: bad -steps entry", part)
				os.Exit(2)
			}
			cfg.steps = append(cfg.steps, n)
		}
	}
	return cfg
}

// ---- the report -------------------------------------------------------------------------

type windowReport struct {
	Groups          int            `json:"groups"`
	Members         int            `json:"members"`
	Connections     int            `json:"connections"`
	SetupSeconds    float64        `json:"setup_seconds"`
	StartUnixMs     int64          `json:"start_unix_ms"`
	EndUnixMs       int64          `json:"end_unix_ms"`
	Seconds         float64        `json:"seconds"`
	Heartbeats      int            `json:"heartbeats"`
	PerSecond       float64        `json:"heartbeats_per_second"`
	ExpectedPerSec  float64        `json:"expected_per_second,omitempty"`
	P50Ms           float64        `json:"p50_ms"`
	P90Ms           float64        `json:"p90_ms"`
	P99Ms           float64        `json:"p99_ms"`
	P999Ms          float64        `json:"p999_ms"`
	MaxMs           float64        `json:"max_ms"`
	ErrorCodes      map[string]int `json:"error_codes"`
	TransportErrors int            `json:"transport_errors"`
	LoadgenCPU      float64        `json:"loadgen_cpu"`
	Samples         [][2]float64   `json:"samples,omitempty"`
	ServerCPU       *float64       `json:"server_cpu,omitempty"`
	ServerRSSMiB    *float64       `json:"server_rss_mib,omitempty"`
}

type report struct {
	Mode           string         `json:"mode"`
	IntervalMs     int            `json:"interval_ms,omitempty"`
	SessionMs      int            `json:"session_timeout_ms"`
	Windows        []windowReport `json:"windows"`
	SessionExpired int            `json:"session_expiries"`
	Rebalances     int            `json:"rebalances_started"`
	JournalRows    int            `json:"journal_rows"`
}

// ---- the run ----------------------------------------------------------------------------

func run(cfg config) (*report, error) {
	toks, err := readTokens(cfg.tokensFile)
	if err != nil {
		return nil, err
	}
	base, err := url.Parse(cfg.baseURL)
	if err != nil {
		return nil, err
	}
	setupClient := &http.Client{
		Transport: &http.Transport{MaxIdleConnsPerHost: 4096, MaxConnsPerHost: 0},
		Timeout:   120 * time.Second,
	}
	stats := newStats(cfg.conns)
	conns := make([]*conn, cfg.conns)
	for i := range conns {
		conns[i] = &conn{addr: base.Host, add: make(chan []*member, 64), stats: stats.shards[i]}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func(c *conn) {
			defer wg.Done()
			c.loop(cfg, stop)
		}(c)
	}
	rep := &report{Mode: cfg.mode, SessionMs: cfg.sessionMs}
	if cfg.mode != "full" {
		rep.IntervalMs = cfg.intervalMs
	}
	var everyone []*member // for -requests-out
	next := 0              // the next member's connection, round robin
	groups := 0
	for _, target := range cfg.steps {
		started := time.Now()
		var mu sync.Mutex
		var held []*member
		enroll := func(ms []*member) {
			byConn := map[int][]*member{}
			for _, m := range ms {
				m.seq = next
				byConn[next%cfg.conns] = append(byConn[next%cfg.conns], m)
				next++
			}
			for i, batch := range byConn {
				conns[i].add <- batch
			}
		}
		if err := setupGroups(cfg, toks, setupClient, groups, target, func(ms []*member) {
			mu.Lock()
			defer mu.Unlock()
			everyone = append(everyone, ms...)
			if cfg.mode != "full" {
				// Heartbeats start as each group is formed: a session must not lapse
				// while later groups join.
				enroll(ms)
			} else {
				// At full rate the heartbeats would crowd out the joins: they start
				// once the step's groups are all formed.
				held = append(held, ms...)
			}
		}); err != nil {
			close(stop)
			return nil, err
		}
		enroll(held)
		setupSeconds := time.Since(started).Seconds()
		groups = target
		time.Sleep(cfg.settle)
		if cfg.requestsOut != "" {
			// The setup's idle keep-alive connections would count against the server's
			// descriptors, next to the members' and a burst's.
			setupClient.CloseIdleConnections()
			requests := make([]string, len(everyone))
			for i, m := range everyone {
				requests[i] = string(m.request)
			}
			raw, _ := json.Marshal(requests)
			if err := os.WriteFile(cfg.requestsOut+".tmp", raw, 0o600); err != nil {
				return nil, err
			}
			if err := os.Rename(cfg.requestsOut+".tmp", cfg.requestsOut); err != nil {
				return nil, err
			}
		}
		w, samples := measure(cfg, stats)
		if cfg.samples {
			for _, s := range samples {
				w.Samples = append(w.Samples, [2]float64{float64(s.dueMs), round(float64(s.ms), 2)})
			}
		}
		w.Groups = groups
		w.Members = groups * cfg.members
		w.Connections = cfg.conns
		w.SetupSeconds = round(setupSeconds, 2)
		if cfg.mode != "full" {
			w.ExpectedPerSec = round(float64(w.Members)*1000/float64(cfg.intervalMs), 1)
		}
		rep.Windows = append(rep.Windows, w)
		fmt.Fprintf(os.Stderr, "loadgen: %d members: %.0f hb/s p50 %.1f ms p99 %.1f ms (server cpu %v)\n",
			w.Members, w.PerSecond, w.P50Ms, w.P99Ms, deref(w.ServerCPU))
		if w.P99Ms > cfg.stopAboveP99Ms {
			break
		}
	}
	close(stop)
	wg.Wait()
	expired, rebalances, rows, err := journalCounts(setupClient, cfg.baseURL, toks.Admin[0])
	if err != nil {
		return nil, err
	}
	rep.SessionExpired, rep.Rebalances, rep.JournalRows = expired, rebalances, rows
	return rep, nil
}

func deref(p *float64) float64 {
	if p == nil {
		return -1
	}
	return *p
}

func readTokens(path string) (*tokens, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var t tokens
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, err
	}
	if len(t.Admin) == 0 {
		return nil, errors.New("the tokens file has no admin token")
	}
	return &t, nil
}

func groupID(cfg config, index int) string { return fmt.Sprintf("%s%04d", cfg.groupPrefix, index) }

func memberToken(toks *tokens, group string) string {
	if ts := toks.Members[group]; len(ts) > 0 {
		return ts[0]
	}
	return toks.Admin[0]
}

// ---- setup: expected members, joins, syncs ----------------------------------------------

func setupGroups(cfg config, toks *tokens, client *http.Client, from, to int, ready func([]*member)) error {
	sem := make(chan struct{}, cfg.setupParallel)
	errs := make(chan error, to-from)
	var wg sync.WaitGroup
	for g := from; g < to; g++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(g int) {
			defer wg.Done()
			defer func() { <-sem }()
			ms, err := setupGroup(cfg, toks, client, groupID(cfg, g))
			if err != nil {
				errs <- err
				return
			}
			ready(ms)
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return err
	}
	return nil
}

func post(client *http.Client, method, u, token string, body any, out any) error {
	raw, _ := json.Marshal(body)
	req, err := http.NewRequest(method, u, bytes.NewReader(raw))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != 200 {
		return fmt.Errorf("%s %s: %d %s", method, u, resp.StatusCode, data)
	}
	return json.Unmarshal(data, out)
}

type joinResponse struct {
	ErrorCode    int    `json:"error_code"`
	GenerationID int    `json:"generation_id"`
	ProtocolName string `json:"protocol_name"`
	Leader       string `json:"leader"`
	MemberID     string `json:"member_id"`
	Members      []struct {
		MemberID string `json:"member_id"`
	} `json:"members"`
}

type codeResponse struct {
	ErrorCode int `json:"error_code"`
}

func setupGroup(cfg config, toks *tokens, client *http.Client, group string) ([]*member, error) {
	base := cfg.baseURL + "/v1/groups/" + url.PathEscape(group)
	ids := make([]string, cfg.members)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-i%03d", group, i)
	}
	var expected map[string]any
	if err := post(client, "PUT", base+"/expected-members", toks.Admin[0],
		map[string]any{"instance_ids": ids, "timeout_ms": 60000}, &expected); err != nil {
		return nil, err
	}
	token := memberToken(toks, group)
	joins := make([]joinResponse, cfg.members)
	if err := parallel(cfg.members, func(i int) error {
		body := map[string]any{
			"group_id": group, "session_timeout_ms": cfg.sessionMs, "rebalance_timeout_ms": 60000,
			"member_id": "", "group_instance_id": ids[i], "protocol_type": "consumer",
			"protocols": []map[string]string{{"name": "range", "metadata": ""}},
		}
		if err := post(client, "POST", base+"/join", token, body, &joins[i]); err != nil {
			return err
		}
		if joins[i].ErrorCode != 0 {
			return fmt.Errorf("%s join %s: error %d", group, ids[i], joins[i].ErrorCode)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	members := make([]*member, cfg.members)
	if err := parallel(cfg.members, func(i int) error {
		j := joins[i]
		body := map[string]any{
			"group_id": group, "generation_id": j.GenerationID, "member_id": j.MemberID,
			"group_instance_id": ids[i], "protocol_type": "consumer", "protocol_name": j.ProtocolName,
		}
		if j.Leader == j.MemberID {
			assignments := []map[string]string{}
			for _, m := range j.Members {
				assignments = append(assignments, map[string]string{"member_id": m.MemberID, "assignment": ""})
			}
			body["assignments"] = assignments
		}
		var sync codeResponse
		if err := post(client, "POST", base+"/sync", token, body, &sync); err != nil {
			return err
		}
		if sync.ErrorCode != 0 {
			return fmt.Errorf("%s sync %s: error %d", group, ids[i], sync.ErrorCode)
		}
		members[i] = newMember(cfg, group, ids[i], j.MemberID, j.GenerationID, token)
		return nil
	}); err != nil {
		return nil, err
	}
	return members, nil
}

func parallel(n int, f func(int) error) error {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if err := f(i); err != nil {
				errs <- err
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return err
	}
	return nil
}

func newMember(cfg config, group, instance, memberID string, generation int, token string) *member {
	body, _ := json.Marshal(map[string]any{
		"group_id": group, "generation_id": generation, "member_id": memberID,
		"group_instance_id": instance,
	})
	u, _ := url.Parse(cfg.baseURL)
	var b bytes.Buffer
	fmt.Fprintf(&b, "POST /v1/groups/%s/heartbeat HTTP/1.1\r\nHost: %s\r\n", url.PathEscape(group), u.Host)
	fmt.Fprintf(&b, "Authorization: Bearer %s\r\nContent-Type: application/json\r\n", token)
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n", len(body))
	b.Write(body)
	return &member{group: group, instanceID: instance, memberID: memberID, generation: generation, request: b.Bytes()}
}

// ---- heartbeats: one goroutine per keep-alive connection ---------------------------------

type dueHeap []*member

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(*member)) }
func (h *dueHeap) Pop() any {
	old := *h
	m := old[len(old)-1]
	*h = old[:len(old)-1]
	return m
}

type shard struct {
	mu         sync.Mutex
	recording  bool
	latencies  []float32 // ms
	dues       []int64   // each latency's due time (Unix ms)
	codes      map[int]int
	transport  int
	heartbeats int
}

type stats struct{ shards []*shard }

func newStats(n int) *stats {
	s := &stats{shards: make([]*shard, n)}
	for i := range s.shards {
		s.shards[i] = &shard{codes: map[int]int{}}
	}
	return s
}

type conn struct {
	addr  string
	add   chan []*member
	stats *shard
	nc    net.Conn
	br    *bufio.Reader
}

func (c *conn) loop(cfg config, stop <-chan struct{}) {
	var due dueHeap
	var roundRobin []*member
	interval := time.Duration(cfg.intervalMs) * time.Millisecond
	timer := time.NewTimer(time.Hour)
	steady := cfg.mode != "full"
	rr := 0
	for {
		// Take new members without blocking, or block when there is nothing to do.
		if len(due) == 0 && len(roundRobin) == 0 {
			select {
			case <-stop:
				return
			case batch := <-c.add:
				c.enroll(batch, &due, &roundRobin, interval)
			}
			continue
		}
		select {
		case <-stop:
			return
		case batch := <-c.add:
			c.enroll(batch, &due, &roundRobin, interval)
		default:
		}
		var m *member
		var from time.Time
		if steady {
			m = due[0]
			if wait := time.Until(m.due); wait > 0 {
				timer.Reset(wait)
				select {
				case <-stop:
					return
				case batch := <-c.add:
					if !timer.Stop() {
						<-timer.C
					}
					c.enroll(batch, &due, &roundRobin, interval)
					continue
				case <-timer.C:
				}
			}
			from = m.due
		} else {
			m = roundRobin[rr%len(roundRobin)]
			rr++
			from = time.Now()
		}
		code, err := c.heartbeat(m)
		elapsed := time.Since(from)
		c.stats.mu.Lock()
		if c.stats.recording {
			c.stats.heartbeats++
			if err != nil {
				c.stats.transport++
			} else {
				c.stats.latencies = append(c.stats.latencies, float32(elapsed.Seconds()*1000))
				c.stats.dues = append(c.stats.dues, from.UnixMilli())
				c.stats.codes[code]++
			}
		}
		c.stats.mu.Unlock()
		if steady {
			m.due = m.due.Add(interval)
			heap.Fix(&due, 0)
		}
	}
}

func (c *conn) enroll(batch []*member, due *dueHeap, roundRobin *[]*member, interval time.Duration) {
	now := time.Now()
	for _, m := range batch {
		// Each member keeps its own phase in the interval (golden-ratio spacing by its
		// sequence number), so the load is level however the members arrived.
		phase := time.Duration(float64(interval) * math.Mod(float64(m.seq)*0.6180339887498949, 1))
		first := epoch.Add(phase)
		if first.Before(now) {
			first = first.Add(now.Sub(first).Truncate(interval) + interval)
		}
		m.due = first
		heap.Push(due, m)
		*roundRobin = append(*roundRobin, m)
	}
}

var codeKey = []byte(`"error_code":`)

func (c *conn) heartbeat(m *member) (int, error) {
	for attempt := 0; attempt < 2; attempt++ {
		if c.nc == nil {
			nc, err := net.Dial("tcp", c.addr)
			if err != nil {
				return 0, err
			}
			c.nc = nc
			c.br = bufio.NewReaderSize(nc, 4096)
		}
		if _, err := c.nc.Write(m.request); err != nil {
			c.reset()
			continue
		}
		resp, err := http.ReadResponse(c.br, nil)
		if err != nil {
			c.reset()
			continue
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			c.reset()
			continue
		}
		if resp.Close {
			c.reset()
		}
		if resp.StatusCode != 200 {
			return -resp.StatusCode, nil
		}
		i := bytes.Index(body, codeKey)
		if i < 0 {
			return -1, nil
		}
		rest := body[i+len(codeKey):]
		end := bytes.IndexAny(rest, ",}")
		if end < 0 {
			return -1, nil
		}
		code, err := strconv.Atoi(strings.TrimSpace(string(rest[:end])))
		if err != nil {
			return -1, nil
		}
		return code, nil
	}
	return 0, errors.New("connection failed twice")
}

func (c *conn) reset() {
	if c.nc != nil {
		c.nc.Close()
	}
	c.nc, c.br = nil, nil
}

// ---- one measurement window -------------------------------------------------------------

func cpuSeconds() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return tv(ru.Utime) + tv(ru.Stime)
}

func tv(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }

func serverCPU(pid int) (float64, bool) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	text := string(raw)
	fields := strings.Fields(text[strings.LastIndexByte(text, ')')+1:])
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return (utime + stime) / 100, true // USER_HZ is 100 on Linux
}

func serverRSS(pid int) (float64, bool) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			kb, _ := strconv.ParseFloat(strings.Fields(line)[1], 64)
			return round(kb/1024, 1), true
		}
	}
	return 0, false
}

type sample struct {
	dueMs int64
	ms    float32
}

func measure(cfg config, st *stats) (windowReport, []sample) {
	for _, s := range st.shards {
		s.mu.Lock()
		s.recording, s.latencies, s.dues, s.codes, s.transport, s.heartbeats = true, s.latencies[:0], s.dues[:0], map[int]int{}, 0, 0
		s.mu.Unlock()
	}
	started := time.Now()
	cpu0 := cpuSeconds()
	srv0, haveSrv := serverCPU(cfg.serverPid)
	time.Sleep(cfg.window)
	var all []float32
	var samples []sample
	w := windowReport{ErrorCodes: map[string]int{}}
	for _, s := range st.shards {
		s.mu.Lock()
		s.recording = false
		all = append(all, s.latencies...)
		for i, ms := range s.latencies {
			samples = append(samples, sample{s.dues[i], ms})
		}
		for code, n := range s.codes {
			if code != 0 {
				w.ErrorCodes[strconv.Itoa(code)] += n
			}
		}
		w.TransportErrors += s.transport
		w.Heartbeats += s.heartbeats
		s.mu.Unlock()
	}
	seconds := time.Since(started).Seconds()
	w.StartUnixMs = started.UnixMilli()
	w.EndUnixMs = time.Now().UnixMilli()
	w.Seconds = round(seconds, 3)
	w.PerSecond = round(float64(w.Heartbeats)/seconds, 1)
	w.LoadgenCPU = round((cpuSeconds()-cpu0)/seconds, 3)
	if srv1, ok := serverCPU(cfg.serverPid); ok && haveSrv {
		v := round((srv1-srv0)/seconds, 3)
		w.ServerCPU = &v
	}
	if rss, ok := serverRSS(cfg.serverPid); ok {
		w.ServerRSSMiB = &rss
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	pct := func(q float64) float64 {
		if len(all) == 0 {
			return 0
		}
		i := int(q * float64(len(all)-1))
		return round(float64(all[i]), 2)
	}
	w.P50Ms, w.P90Ms, w.P99Ms, w.P999Ms, w.MaxMs = pct(0.5), pct(0.9), pct(0.99), pct(0.999), pct(1)
	return w, samples
}

// ---- burst mode: a fleet reconnecting at once ----------------------------------------------

type burstReport struct {
	Connections     int            `json:"connections"`
	SourceAddresses int            `json:"source_addresses"`
	Answered        int            `json:"answered"`
	Failed          int            `json:"failed"`
	Failures        map[string]int `json:"failures"`
	StartUnixMs     int64          `json:"start_unix_ms"`
	Seconds         float64        `json:"seconds_until_all_answered"`
	PerSecond       float64        `json:"answered_per_second"`
	// From the burst's start to each connection's first answer (connect, send, answer).
	AnswerP50Ms float64        `json:"answer_p50_ms"`
	AnswerP99Ms float64        `json:"answer_p99_ms"`
	AnswerMaxMs float64        `json:"answer_max_ms"`
	LoadgenCPU  float64        `json:"loadgen_cpu_seconds"`
	ErrorCodes  map[string]int `json:"error_codes"`
}

// burstFromFile opens -burst connections at once, each from one of -burst-addrs loopback
// source addresses and sending one of the heartbeat requests in -requests (round robin),
// and reports once every one is answered (or has failed). A process of its own, so that
// the members whose latency is measured (another loadgen) do not wait behind it.
func burstFromFile(cfg config) (*burstReport, error) {
	raw, err := os.ReadFile(cfg.requestsFile)
	if err != nil {
		return nil, err
	}
	var requests []string
	if err := json.Unmarshal(raw, &requests); err != nil {
		return nil, err
	}
	if len(requests) == 0 {
		return nil, errors.New("no requests in " + cfg.requestsFile)
	}
	base, err := url.Parse(cfg.baseURL)
	if err != nil {
		return nil, err
	}
	b := runBurst(cfg, base.Host, requests)
	return &b, nil
}

func quantile(sorted []float32, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return round(float64(sorted[int(q*float64(len(sorted)-1))]), 2)
}

func runBurst(cfg config, addr string, requests []string) burstReport {
	b := burstReport{Connections: cfg.burst, SourceAddresses: cfg.burstAddrs, Failures: map[string]int{}, ErrorCodes: map[string]int{}}
	var held []net.Conn
	var mu sync.Mutex
	var answers []float32
	var answered sync.WaitGroup
	cpu0 := cpuSeconds()
	started := time.Now()
	b.StartUnixMs = started.UnixMilli()
	for i := 0; i < cfg.burst; i++ {
		answered.Add(1)
		go func(i int) {
			fail := func(kind string) {
				mu.Lock()
				b.Failed++
				b.Failures[kind]++
				mu.Unlock()
				answered.Done()
			}
			source := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i%cfg.burstAddrs))}
			dialer := net.Dialer{LocalAddr: source, Timeout: 120 * time.Second}
			nc, err := dialer.Dial("tcp", addr)
			if err != nil {
				fail("dial")
				return
			}
			_ = nc.SetDeadline(time.Now().Add(120 * time.Second))
			if _, err := nc.Write([]byte(requests[i%len(requests)])); err != nil {
				nc.Close()
				fail("write")
				return
			}
			resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
			if err != nil {
				nc.Close()
				fail("closed")
				return
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				nc.Close()
				fail(strconv.Itoa(resp.StatusCode))
				return
			}
			elapsed := time.Since(started)
			mu.Lock()
			answers = append(answers, float32(elapsed.Seconds()*1000))
			if i := bytes.Index(body, codeKey); i >= 0 && !bytes.HasPrefix(body[i+len(codeKey):], []byte("0")) {
				b.ErrorCodes[string(body[i+len(codeKey):i+len(codeKey)+2])]++
			}
			held = append(held, nc) // a member keeps its connection
			mu.Unlock()
			answered.Done()
		}(i)
	}
	answered.Wait()
	b.Seconds = round(time.Since(started).Seconds(), 3)
	b.LoadgenCPU = round(cpuSeconds()-cpu0, 3)
	b.Answered = len(answers)
	if b.Seconds > 0 {
		b.PerSecond = round(float64(b.Answered)/b.Seconds, 1)
	}
	for _, nc := range held {
		nc.Close()
	}
	sort.Slice(answers, func(i, j int) bool { return answers[i] < answers[j] })
	b.AnswerP50Ms, b.AnswerP99Ms, b.AnswerMaxMs = quantile(answers, 0.5), quantile(answers, 0.99), quantile(answers, 1)
	fmt.Fprintf(os.Stderr, "loadgen: burst of %d: %d answered in %.2f s (%d failed)\n", cfg.burst, b.Answered, b.Seconds, b.Failed)
	return b
}

func round(v float64, digits int) float64 {
	p := 1.0
	for i := 0; i < digits; i++ {
		p *= 10
	}
	return float64(int64(v*p+0.5)) / p
}

// ---- the journal: did any session expire? -------------------------------------------------

func journalCounts(client *http.Client, baseURL, admin string) (expired, rebalances, rows int, err error) {
	since := 0
	for {
		u := fmt.Sprintf("%s/v1/journal?since=%d&limit=10000", baseURL, since)
		req, _ := http.NewRequest("GET", u, nil)
		req.Header.Set("Authorization", "Bearer "+admin)
		resp, err := client.Do(req)
		if err != nil {
			return 0, 0, 0, err
		}
		var page struct {
			Events []struct {
				Kind   string         `json:"kind"`
				Detail map[string]any `json:"detail"`
			} `json:"events"`
			NextSince int `json:"next_since"`
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil {
			return 0, 0, 0, err
		}
		for _, e := range page.Events {
			rows++
			if e.Kind == "member_removed" && e.Detail["reason"] == "session_timeout" {
				expired++
			}
			if e.Kind == "rebalance_started" {
				rebalances++
			}
		}
		if len(page.Events) == 0 || page.NextSince == since {
			return expired, rebalances, rows, nil
		}
		since = page.NextSince
	}
}
