// Fleet mode (-mode fleet): the fleet as production connects it, against either server.
//
// Every member is a goroutine with a keep-alive connection of its own (spread over -burst-addrs
// loopback source addresses: our server caps connections per client address) that runs the
// classic group protocol with static membership the way a client library does: JoinGroup
// with its group.instance.id, SyncGroup (the leader sends a range assignment it computed),
// then a Heartbeat every -interval-ms at its own due time; REBALANCE_IN_PROGRESS,
// ILLEGAL_GENERATION or UNKNOWN_MEMBER_ID send it back to JoinGroup. The same member code
// speaks either protocol (-protocol):
//
//   - http: our coordinator's JSON API (POST /v1/groups/{g}/join, /sync, /heartbeat);
//   - kafka: the Kafka wire protocol to a broker (JoinGroup v9, SyncGroup v5, Heartbeat v4,
//     after FindCoordinator v4), encoded and decoded with franz-go's kmsg: the raw requests,
//     one per connection at a time, as a consumer's group connection does.
//
// The run: the members start at -start-rate a second (formation: from the first start until
// every group has a generation that all its members have synced), -settle, a -window of heartbeats (latency from each one's due
// time), then the full rebalance of the last group (-rebalance-members members): a new
// static member joins it, the others learn it from their next heartbeat and rejoin; the
// rebalance time runs from the new member's JoinGroup until every member, the new one too,
// has synced the new generation.
package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Kafka error codes the members act on (the same numbers in our API).
const (
	errNone                = 0
	errCoordinatorLoading  = 14
	errCoordinatorNotAvail = 15
	errNotCoordinator      = 16
	errIllegalGeneration   = 22
	errUnknownMemberID     = 25
	errRebalanceInProgress = 27
	errMemberIDRequired    = 79
)

const fleetTopic = "fleet"

const (
	joinGroupKey     = 11
	rebalanceTimeout = 60 * time.Second
)

// requestTimeout is how long a member waits for an answer before it drops the connection and
// starts over, as a client library does (a JoinGroup may be held for the rebalance timeout):
// without it a connection the server never accepted (a full listen queue drops it after the
// client's handshake completed) would hold its member forever.
func requestTimeout(join bool) time.Duration {
	if join {
		return rebalanceTimeout + 5*time.Second
	}
	return 30 * time.Second
}

type joinResult struct {
	code       int
	generation int32
	protocol   string
	leader     string
	memberID   string
	members    []string // the leader's view: member ids
}

// protocolConn is one member's connection, in either protocol.
type protocolConn interface {
	join(m *fleetMember) (joinResult, error)
	sync(m *fleetMember, assignments map[string][]byte) (int, error)
	heartbeat(m *fleetMember) (int, error)
	close()
}

type fleetMember struct {
	index      int // in the whole fleet: its phase, its stats shard
	group      *fleetGroup
	instanceID string
	memberID   string
	generation int32
	protocol   string
	token      string
	conn       protocolConn
	joiner     bool // the member whose JoinGroup starts the timed rebalance
}

// fleetGroup tracks which generation every member of one group has synced.
type fleetGroup struct {
	id        string
	sessionMs int
	size      int // members expected in the generation that counts
	mu        sync.Mutex
	synced    map[int32]int // generation -> members synced in it
	after     int32         // generations up to this one do not count (the rebalance's)
	doneAt    time.Time
	doneGen   int32
	doneOnce  chan struct{}
}

func newFleetGroup(id string, size, sessionMs int) *fleetGroup {
	return &fleetGroup{id: id, size: size, sessionMs: sessionMs, synced: map[int32]int{}, doneOnce: make(chan struct{})}
}

func (g *fleetGroup) recordSync(generation int32) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.synced[generation]++
	if generation > g.after && g.synced[generation] == g.size && g.doneAt.IsZero() {
		g.doneAt, g.doneGen = time.Now(), generation
		close(g.doneOnce)
	}
}

// expect resets the group for the next complete generation (the rebalance's).
func (g *fleetGroup) expect(size int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.size, g.after, g.doneAt, g.doneOnce = size, g.doneGen, time.Time{}, make(chan struct{})
}

func (g *fleetGroup) done() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.doneOnce
}

type fleetReport struct {
	Protocol         string       `json:"protocol"`
	Groups           int          `json:"groups"`
	Members          int          `json:"members"`
	RebalanceMembers int          `json:"rebalance_group_members"`
	SourceAddresses  int          `json:"source_addresses"`
	IntervalMs       int          `json:"interval_ms"`
	SessionMs        int          `json:"session_timeout_ms"`
	StartRate        float64      `json:"start_rate"`
	StartSeconds     float64      `json:"start_seconds"`
	FormationSeconds float64      `json:"formation_seconds"`
	Window           windowReport `json:"window"`
	// From /proc/PID/task/*/schedstat over the window, seconds per second.
	ServerRunning         float64  `json:"server_threads_running_per_second"`
	ServerRunnableWaiting float64  `json:"server_threads_runnable_waiting_per_second"`
	RebalanceSeconds      *float64 `json:"rebalance_seconds"`
	RebalanceError        string   `json:"rebalance_error,omitempty"`
	// Per phase of the rebalance (phases.go): instants from the new member's connection.
	RebalancePhases map[string]phaseSummary `json:"rebalance_phases,omitempty"`
	// Our coordinator's journal for the rebalance group (http only; phases.go).
	RebalanceServerPhases map[string]float64 `json:"rebalance_server_phases_ms,omitempty"`
	Joins                 int64              `json:"joins"`
	Rejoins               map[string]int     `json:"rejoins_by_code"`
	ConnectFailures       int64              `json:"connect_failures"`
	Reconnects            int64              `json:"reconnects"`
	SessionExpired        *int               `json:"session_expiries,omitempty"`
	ServerPeakRSSMiB      *float64           `json:"server_rss_mib_after_rebalance,omitempty"`
}

type fleet struct {
	cfg       config
	host      string
	stats     *stats
	stop      chan struct{}
	joins     atomic.Int64
	connFail  atomic.Int64
	reconnect atomic.Int64
	mu        sync.Mutex
	rejoins   map[int]int
	wg        sync.WaitGroup
	phases    *rebalancePhases // nil without a timed rebalance
}

func (f *fleet) countRejoin(code int) {
	f.mu.Lock()
	f.rejoins[code]++
	f.mu.Unlock()
}

func runFleet(cfg config) (*fleetReport, error) {
	f := &fleet{cfg: cfg, stats: newStats(256), stop: make(chan struct{}), rejoins: map[int]int{}}
	var toks *tokens
	if cfg.protocol == "http" {
		t, err := readTokens(cfg.tokensFile)
		if err != nil {
			return nil, err
		}
		toks = t
		u, err := url.Parse(cfg.baseURL)
		if err != nil {
			return nil, err
		}
		f.host = u.Host
	} else if cfg.protocol == "kafka" {
		f.host = cfg.bootstrap
	} else {
		return nil, fmt.Errorf("-protocol %q: http or kafka", cfg.protocol)
	}
	// The groups: -groups of -members, then the rebalance group.
	var groups []*fleetGroup
	for g := 0; g < cfg.groups; g++ {
		groups = append(groups, newFleetGroup(groupID(cfg, g), cfg.members, cfg.sessionMs))
	}
	rebalanceGroup := newFleetGroup(groupID(cfg, cfg.groups), cfg.rebalanceMembers, cfg.sessionMs)
	if cfg.rebalanceMembers > 0 {
		groups = append(groups, rebalanceGroup)
		f.phases = newRebalancePhases(rebalanceGroup)
	}
	var members []*fleetMember
	for _, g := range groups {
		for i := 0; i < g.size; i++ {
			m := &fleetMember{index: len(members), group: g, instanceID: fmt.Sprintf("%s-i%04d", g.id, i)}
			if toks != nil {
				m.token = memberToken(toks, g.id)
			}
			members = append(members, m)
		}
	}
	if toks != nil {
		// Our coordinator's way to form a fleet at once: the expected members (what the
		// operator sets); the broker's is its initial rebalance delay.
		client := &http.Client{Timeout: 60 * time.Second}
		for _, g := range groups {
			var ids []string
			for _, m := range members {
				if m.group == g {
					ids = append(ids, m.instanceID)
				}
			}
			var out map[string]any
			if err := post(client, "PUT", cfg.baseURL+"/v1/groups/"+url.PathEscape(g.id)+"/expected-members",
				toks.Admin[0], map[string]any{"instance_ids": ids, "timeout_ms": 60000}, &out); err != nil {
				return nil, err
			}
		}
		client.CloseIdleConnections()
	}
	if cfg.protocol == "kafka" {
		// The broker creates and loads its offsets topic on the first FindCoordinator: a
		// start-up cost, not the fleet's formation.
		if err := f.warmUp(cfg.groupPrefix + "warm-up"); err != nil {
			return nil, err
		}
	}
	rep := &fleetReport{
		Protocol: cfg.protocol, Groups: len(groups), Members: len(members), RebalanceMembers: cfg.rebalanceMembers,
		SourceAddresses: cfg.burstAddrs, IntervalMs: cfg.intervalMs, SessionMs: cfg.sessionMs,
		StartRate: cfg.startRate,
	}
	started := time.Now()
	for i, m := range members {
		if cfg.startRate > 0 {
			// Members start at -start-rate a second: all at once, a fleet's connections
			// overflow a server's listen queue (docs/performance.md, "A fleet reconnecting
			// at once"), and that is another measurement.
			if wait := time.Until(started.Add(time.Duration(float64(i) / cfg.startRate * float64(time.Second)))); wait > 0 {
				time.Sleep(wait)
			}
		}
		f.wg.Add(1)
		go f.runMember(m)
	}
	rep.StartSeconds = round(time.Since(started).Seconds(), 3)
	deadline := time.After(cfg.formationTimeout)
	for _, g := range groups {
		select {
		case <-g.done():
		case <-deadline:
			close(f.stop)
			formed := 0
			for _, g := range groups {
				select {
				case <-g.done():
					formed++
				default:
				}
			}
			return nil, fmt.Errorf("formation: %d of %d groups formed in %s (connect failures %d, rejoins %v)",
				formed, len(groups), cfg.formationTimeout, f.connFail.Load(), f.rejoins)
		}
	}
	formedAt := started
	for _, g := range groups {
		if g.doneAt.After(formedAt) {
			formedAt = g.doneAt
		}
	}
	rep.FormationSeconds = round(formedAt.Sub(started).Seconds(), 3)
	fmt.Fprintf(os.Stderr, "loadgen: %s fleet of %d formed in %.2f s\n", cfg.protocol, len(members), rep.FormationSeconds)
	time.Sleep(cfg.settle)
	run0, wait0, haveSched := schedSeconds(cfg.serverPid)
	w, _ := measure(cfg, f.stats)
	if run1, wait1, ok := schedSeconds(cfg.serverPid); ok && haveSched {
		// What the server's threads ran and waited runnable per second of the window: a
		// server that waits on a shared core more than it runs is measured short of its own
		// capacity.
		rep.ServerRunning = round((run1-run0)/w.Seconds, 3)
		rep.ServerRunnableWaiting = round((wait1-wait0)/w.Seconds, 3)
	}
	w.Groups, w.Members, w.Connections = len(groups), len(members), len(members)
	w.ExpectedPerSec = round(float64(w.Members)*1000/float64(cfg.intervalMs), 1)
	rep.Window = w
	fmt.Fprintf(os.Stderr, "loadgen: %s: %.0f hb/s p50 %.1f ms p99 %.1f ms (server cpu %v)\n",
		cfg.protocol, w.PerSecond, w.P50Ms, w.P99Ms, deref(w.ServerCPU))
	var rebalanceBegan time.Time
	if cfg.rebalanceMembers > 0 {
		rebalanceGroup.expect(cfg.rebalanceMembers + 1)
		joiner := &fleetMember{index: len(members), group: rebalanceGroup, instanceID: rebalanceGroup.id + "-joiner", joiner: true}
		if toks != nil {
			joiner.token = memberToken(toks, rebalanceGroup.id)
		}
		// The clock starts as the joiner's connection is open: its JoinGroup starts the rebalance.
		conn, err := f.dial(joiner)
		if err != nil {
			rep.RebalanceError = err.Error()
		} else {
			joiner.conn = conn
			began := time.Now()
			rebalanceBegan = began
			f.phases.start(began)
			f.wg.Add(1)
			go f.runMember(joiner)
			select {
			case <-rebalanceGroup.done():
				v := round(rebalanceGroup.doneAt.Sub(began).Seconds(), 3)
				rep.RebalanceSeconds = &v
				f.phases.stop(rebalanceGroup.doneAt)
			case <-time.After(cfg.formationTimeout):
				rep.RebalanceError = "not complete in " + cfg.formationTimeout.String()
			}
		}
	}
	if f.phases != nil {
		f.phases.stop(time.Now()) // a rebalance that did not complete: what it reached
		rep.RebalancePhases = f.phases.report()
	}
	if rss, ok := serverRSS(cfg.serverPid); ok {
		rep.ServerPeakRSSMiB = &rss
	}
	close(f.stop)
	f.wg.Wait()
	rep.Joins, rep.ConnectFailures, rep.Reconnects = f.joins.Load(), f.connFail.Load(), f.reconnect.Load()
	rep.Rejoins = map[string]int{}
	for code, n := range f.rejoins {
		rep.Rejoins[strconv.Itoa(code)] = n
	}
	if toks != nil && cfg.rebalanceMembers > 0 && !rebalanceBegan.IsZero() {
		client := &http.Client{Timeout: 60 * time.Second}
		if phases, err := serverPhases(client, cfg.baseURL, toks.Admin[0], rebalanceGroup.id, rebalanceBegan); err == nil {
			rep.RebalanceServerPhases = phases
		}
	}
	if toks != nil {
		expired, _, _, err := journalCounts(&http.Client{Timeout: 60 * time.Second}, cfg.baseURL, toks.Admin[0])
		if err == nil {
			rep.SessionExpired = &expired
		}
	} else {
		// The broker has no journal: an expired session shows as UNKNOWN_MEMBER_ID.
		n := rep.Rejoins[strconv.Itoa(errUnknownMemberID)]
		rep.SessionExpired = &n
	}
	return rep, nil
}

// schedSeconds sums a process's threads' time on a CPU and time runnable but waiting for
// one (the first two fields of /proc/PID/task/TID/schedstat, in nanoseconds).
func schedSeconds(pid int) (running, waiting float64, ok bool) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || pid == 0 {
		return 0, 0, false
	}
	for _, task := range tasks {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, task.Name()))
		if err != nil {
			continue // a thread that has exited
		}
		var run, wait float64
		if _, err := fmt.Sscan(string(raw), &run, &wait); err != nil {
			continue
		}
		running += run / 1e9
		waiting += wait / 1e9
	}
	return running, waiting, true
}

func (f *fleet) warmUp(group string) error {
	deadline := time.Now().Add(f.cfg.formationTimeout)
	for time.Now().Before(deadline) {
		nc, err := net.DialTimeout("tcp", f.host, 10*time.Second)
		if err == nil {
			c := &kafkaConn{nc: nc, br: bufio.NewReader(nc)}
			code, err := c.findCoordinator(group)
			if err == nil && code == errNone {
				// Ready once a JoinGroup is answered by a loaded coordinator: a dynamic
				// member's first join is told MEMBER_ID_REQUIRED.
				var j joinResult
				probe := &fleetMember{group: newFleetGroup(group, 1, 45000)}
				j, err = c.join(probe)
				code = j.code
			}
			c.close()
			if err == nil && code == errMemberIDRequired {
				return nil
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return errors.New("kafka: no group coordinator within " + f.cfg.formationTimeout.String())
}

func (f *fleet) stopped() bool {
	select {
	case <-f.stop:
		return true
	default:
		return false
	}
}

// pause waits d, or less when the run stops; false if it stopped.
func (f *fleet) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-f.stop:
		return false
	case <-t.C:
		return true
	}
}

func (f *fleet) dial(m *fleetMember) (protocolConn, error) {
	source := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+m.index%f.cfg.burstAddrs))}
	dialer := net.Dialer{LocalAddr: source, Timeout: 30 * time.Second}
	nc, err := dialer.Dial("tcp", f.host)
	if err != nil {
		return nil, err
	}
	if f.cfg.protocol == "kafka" {
		return &kafkaConn{nc: nc, br: bufio.NewReaderSize(nc, 1024)}, nil
	}
	return &httpConn{nc: nc, br: bufio.NewReaderSize(nc, 1024), host: f.host}, nil
}

// runMember is one member's life: connect, join, sync, heartbeat, rejoin when told.
func (f *fleet) runMember(m *fleetMember) {
	defer f.wg.Done()
	defer func() {
		if m.conn != nil {
			m.conn.close()
		}
	}()
	interval := time.Duration(f.cfg.intervalMs) * time.Millisecond
	shard := f.stats.shards[m.index%len(f.stats.shards)]
	// Each member keeps its own phase in the interval (golden-ratio spacing by its index).
	phase := time.Duration(float64(interval) * math.Mod(float64(m.index)*0.6180339887498949, 1))
	backoff := 50 * time.Millisecond
	for !f.stopped() {
		if m.conn == nil {
			conn, err := f.dial(m)
			if err != nil {
				f.connFail.Add(1)
				if !f.pause(backoff) {
					return
				}
				continue
			}
			m.conn = conn
		}
		if f.cfg.protocol == "kafka" && m.generation == 0 && m.memberID == "" {
			if code, err := m.conn.(*kafkaConn).findCoordinator(m.group.id); err != nil || code != errNone {
				if err != nil {
					f.lost(m, err)
				} else {
					f.countRejoin(code)
				}
				if !f.pause(backoff) {
					return
				}
				continue
			}
		}
		f.joins.Add(1)
		joinSent := time.Now()
		if m.joiner {
			f.phases.instant(m, phaseJoinerJoinSent, joinSent)
		} else {
			f.phases.instant(m, phaseJoinSent, joinSent)
		}
		j, err := m.conn.join(m)
		if m.joiner {
			f.phases.instant(m, phaseJoinerJoinAnswered, time.Now())
		} else {
			f.phases.span(m, phaseJoinAnswered, phaseJoinHeld, joinSent, time.Now())
		}
		if err != nil {
			f.lost(m, err)
			if !f.pause(backoff) {
				return
			}
			continue
		}
		switch j.code {
		case errNone:
		case errMemberIDRequired:
			m.memberID = j.memberID
			continue
		case errUnknownMemberID:
			m.memberID = ""
			f.countRejoin(j.code)
			continue
		default:
			f.countRejoin(j.code)
			if !f.pause(backoff) {
				return
			}
			continue
		}
		m.memberID, m.generation, m.protocol = j.memberID, j.generation, j.protocol
		var assignments map[string][]byte
		leader := j.leader == j.memberID
		if leader {
			assignments = rangeAssignment(j.members)
		}
		syncSent := time.Now()
		if leader {
			f.phases.instant(m, phaseLeaderSyncSent, syncSent)
		}
		code, err := m.conn.sync(m, assignments)
		if leader {
			f.phases.instant(m, phaseLeaderSyncDone, time.Now())
		} else {
			f.phases.span(m, phaseSyncAnswered, phaseSyncHeld, syncSent, time.Now())
		}
		if err != nil {
			f.lost(m, err)
			if !f.pause(backoff) {
				return
			}
			continue
		}
		if code != errNone {
			f.countRejoin(code)
			if code == errUnknownMemberID {
				m.memberID = ""
			}
			continue
		}
		m.group.recordSync(m.generation)
		// Heartbeats at the member's due times until told to rejoin.
		due := epoch.Add(phase)
		if now := time.Now(); due.Before(now) {
			due = due.Add(now.Sub(due).Truncate(interval) + interval)
		}
		for {
			if !f.pause(time.Until(due)) {
				return
			}
			code, err := m.conn.heartbeat(m)
			answered := time.Now()
			elapsed := answered.Sub(due)
			if err == nil && code == errRebalanceInProgress {
				f.phases.notice(m, due, answered)
			}
			shard.mu.Lock()
			if shard.recording {
				shard.heartbeats++
				if err != nil {
					shard.transport++
				} else {
					shard.latencies = append(shard.latencies, float32(elapsed.Seconds()*1000))
					shard.dues = append(shard.dues, due.UnixMilli())
					shard.codes[code]++
				}
			}
			shard.mu.Unlock()
			if err != nil {
				f.lost(m, err)
				break
			}
			due = due.Add(interval)
			if code != errNone {
				f.countRejoin(code)
				if code == errUnknownMemberID {
					m.memberID = ""
				}
				break
			}
		}
	}
}

// lost drops a member's connection after a transport error: it reconnects and rejoins.
func (f *fleet) lost(m *fleetMember, err error) {
	if m.conn != nil {
		m.conn.close()
		m.conn = nil
	}
	if err != nil {
		f.reconnect.Add(1)
	}
}

// rangeAssignment is the leader's assignment: one partition of the fleet topic per member,
// in member-id order (the range assignor with as many partitions as members).
func rangeAssignment(memberIDs []string) map[string][]byte {
	sorted := append([]string(nil), memberIDs...)
	sort.Strings(sorted)
	out := make(map[string][]byte, len(sorted))
	for i, id := range sorted {
		a := kmsg.NewConsumerMemberAssignment()
		a.Topics = []kmsg.ConsumerMemberAssignmentTopic{{Topic: fleetTopic, Partitions: []int32{int32(i)}}}
		out[id] = a.AppendTo(nil)
	}
	return out
}

func subscription() []byte {
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Topics = []string{fleetTopic}
	return meta.AppendTo(nil)
}

// ---- the Kafka wire protocol: one request at a time on the member's connection ----------

type kafkaConn struct {
	nc          net.Conn
	br          *bufio.Reader
	correlation int32
	buf         []byte
}

var formatter = kmsg.NewRequestFormatter(kmsg.FormatterClientID("loadgen"))

func (c *kafkaConn) close() { c.nc.Close() }

func (c *kafkaConn) roundTrip(req kmsg.Request) (kmsg.Response, error) {
	_ = c.nc.SetDeadline(time.Now().Add(requestTimeout(req.Key() == joinGroupKey)))
	c.correlation++
	c.buf = formatter.AppendRequest(c.buf[:0], req, c.correlation)
	if _, err := c.nc.Write(c.buf); err != nil {
		return nil, err
	}
	var size [4]byte
	if _, err := io.ReadFull(c.br, size[:]); err != nil {
		return nil, err
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(c.br, body); err != nil {
		return nil, err
	}
	if len(body) < 4 || int32(binary.BigEndian.Uint32(body)) != c.correlation {
		return nil, errors.New("kafka: response out of order")
	}
	body = body[4:]
	resp := req.ResponseKind()
	if resp.IsFlexible() {
		// The response header's tagged fields: none expected (one zero count byte).
		if len(body) == 0 || body[0] != 0 {
			return nil, errors.New("kafka: unexpected response header tags")
		}
		body = body[1:]
	}
	if err := resp.ReadFrom(body); err != nil {
		return nil, err
	}
	return resp, nil
}

func (c *kafkaConn) findCoordinator(group string) (int, error) {
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.Version = 4
	req.CoordinatorKeys = []string{group}
	resp, err := c.roundTrip(req)
	if err != nil {
		return 0, err
	}
	r := resp.(*kmsg.FindCoordinatorResponse)
	if len(r.Coordinators) != 1 {
		return 0, errors.New("kafka: FindCoordinator answered no coordinator")
	}
	return int(r.Coordinators[0].ErrorCode), nil
}

func (c *kafkaConn) join(m *fleetMember) (joinResult, error) {
	req := kmsg.NewPtrJoinGroupRequest()
	req.Version = 9
	req.Group = m.group.id
	req.SessionTimeoutMillis = int32(m.sessionMs())
	req.RebalanceTimeoutMillis = int32(rebalanceTimeout.Milliseconds())
	req.MemberID = m.memberID
	if m.instanceID != "" {
		req.InstanceID = kmsg.StringPtr(m.instanceID)
	}
	req.ProtocolType = "consumer"
	req.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: subscription()}}
	resp, err := c.roundTrip(req)
	if err != nil {
		return joinResult{}, err
	}
	r := resp.(*kmsg.JoinGroupResponse)
	j := joinResult{code: int(r.ErrorCode), generation: r.Generation, leader: r.LeaderID, memberID: r.MemberID}
	if r.Protocol != nil {
		j.protocol = *r.Protocol
	}
	for _, member := range r.Members {
		j.members = append(j.members, member.MemberID)
	}
	return j, nil
}

func (c *kafkaConn) sync(m *fleetMember, assignments map[string][]byte) (int, error) {
	req := kmsg.NewPtrSyncGroupRequest()
	req.Version = 5
	req.Group = m.group.id
	req.Generation = m.generation
	req.MemberID = m.memberID
	req.InstanceID = kmsg.StringPtr(m.instanceID)
	req.ProtocolType = kmsg.StringPtr("consumer")
	req.Protocol = kmsg.StringPtr(m.protocol)
	for id, a := range assignments {
		req.GroupAssignment = append(req.GroupAssignment, kmsg.SyncGroupRequestGroupAssignment{MemberID: id, MemberAssignment: a})
	}
	resp, err := c.roundTrip(req)
	if err != nil {
		return 0, err
	}
	return int(resp.(*kmsg.SyncGroupResponse).ErrorCode), nil
}

func (c *kafkaConn) heartbeat(m *fleetMember) (int, error) {
	req := kmsg.NewPtrHeartbeatRequest()
	req.Version = 4
	req.Group = m.group.id
	req.Generation = m.generation
	req.MemberID = m.memberID
	req.InstanceID = kmsg.StringPtr(m.instanceID)
	resp, err := c.roundTrip(req)
	if err != nil {
		return 0, err
	}
	return int(resp.(*kmsg.HeartbeatResponse).ErrorCode), nil
}

// sessionMs is the session timeout every member joins with (the run's -session-ms).
func (m *fleetMember) sessionMs() int { return m.group.sessionMs }

// ---- our HTTP API: JSON over the member's keep-alive connection ------------------------

type httpConn struct {
	nc   net.Conn
	br   *bufio.Reader
	host string
	hb   []byte // the pre-encoded heartbeat of the member's current generation
	hbOf string
}

func (c *httpConn) close() { c.nc.Close() }

func (c *httpConn) encode(m *fleetMember, verb string, body any) []byte {
	raw, _ := json.Marshal(body)
	var b bytes.Buffer
	fmt.Fprintf(&b, "POST /v1/groups/%s/%s HTTP/1.1\r\nHost: %s\r\n", url.PathEscape(m.group.id), verb, c.host)
	fmt.Fprintf(&b, "Authorization: Bearer %s\r\nContent-Type: application/json\r\n", m.token)
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n", len(raw))
	b.Write(raw)
	return b.Bytes()
}

func (c *httpConn) roundTrip(request []byte, out any, join bool) error {
	_ = c.nc.SetDeadline(time.Now().Add(requestTimeout(join)))
	if _, err := c.nc.Write(request); err != nil {
		return err
	}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return err
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode != 200 {
		return fmt.Errorf("http %d: %s", resp.StatusCode, bytes.TrimSpace(data))
	}
	if resp.Close {
		return errors.New("http: the server closed the connection")
	}
	return json.Unmarshal(data, out)
}

func (c *httpConn) join(m *fleetMember) (joinResult, error) {
	var r joinResponse
	err := c.roundTrip(c.encode(m, "join", map[string]any{
		"group_id": m.group.id, "session_timeout_ms": m.sessionMs(), "rebalance_timeout_ms": rebalanceTimeout.Milliseconds(),
		"member_id": m.memberID, "group_instance_id": m.instanceID, "protocol_type": "consumer",
		"protocols": []map[string]any{{"name": "range", "metadata": subscription()}},
	}), &r, true)
	if err != nil {
		return joinResult{}, err
	}
	j := joinResult{code: r.ErrorCode, generation: int32(r.GenerationID), protocol: r.ProtocolName, leader: r.Leader, memberID: r.MemberID}
	for _, member := range r.Members {
		j.members = append(j.members, member.MemberID)
	}
	return j, nil
}

func (c *httpConn) sync(m *fleetMember, assignments map[string][]byte) (int, error) {
	body := map[string]any{
		"group_id": m.group.id, "generation_id": m.generation, "member_id": m.memberID,
		"group_instance_id": m.instanceID, "protocol_type": "consumer", "protocol_name": m.protocol,
	}
	if assignments != nil {
		list := []map[string]any{}
		for id, a := range assignments {
			list = append(list, map[string]any{"member_id": id, "assignment": a})
		}
		body["assignments"] = list
	}
	var r codeResponse
	if err := c.roundTrip(c.encode(m, "sync", body), &r, false); err != nil {
		return 0, err
	}
	return r.ErrorCode, nil
}

func (c *httpConn) heartbeat(m *fleetMember) (int, error) {
	if key := fmt.Sprint(m.memberID, m.generation); c.hb == nil || c.hbOf != key {
		c.hb = c.encode(m, "heartbeat", map[string]any{
			"group_id": m.group.id, "generation_id": m.generation, "member_id": m.memberID,
			"group_instance_id": m.instanceID,
		})
		c.hbOf = fmt.Sprint(m.memberID, m.generation)
	}
	var r codeResponse
	if err := c.roundTrip(c.hb, &r, false); err != nil {
		return 0, err
	}
	return r.ErrorCode, nil
}
