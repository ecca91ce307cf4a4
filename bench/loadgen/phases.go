// The rebalance's phases, timestamped by the members themselves (fleet mode, either protocol,
// the same code): where the time between the new member's JoinGroup and the last member's
// synced generation goes. Every instant is in milliseconds since the new member's connection
// was open (the rebalance clock's start); durations are in milliseconds too.
package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"
)

// phase names, in the order a rebalance passes through them.
const (
	phaseJoinerJoinSent     = "joiner_join_sent"
	phaseJoinerJoinAnswered = "joiner_join_answered"
	// An existing member's heartbeat answered REBALANCE_IN_PROGRESS: when, and how long after
	// the heartbeat's due time (what the notice costs beyond the member's own schedule).
	phaseNoticeAnswered = "notice_answered"
	phaseNoticeAfterDue = "notice_after_due"
	phaseJoinSent       = "join_sent"
	phaseJoinAnswered   = "join_answered"
	phaseJoinHeld       = "join_held" // answered - sent: how long the server parked the JoinGroup
	phaseLeaderSyncSent = "leader_sync_sent"
	phaseLeaderSyncDone = "leader_sync_answered"
	phaseSyncAnswered   = "follower_sync_answered" // its max is the last follower's
	phaseSyncHeld       = "follower_sync_held"
	// Done: every member synced the new generation (the rebalance time).
	phaseDone = "all_synced"
)

// phaseEvent is one observation: when it happened and its value (the instant itself, or a
// duration ending then).
type phaseEvent struct {
	at    time.Duration
	value float64
}

// phaseSummary is one phase over the rebalance's members.
type phaseSummary struct {
	Count int     `json:"count"`
	P50Ms float64 `json:"p50_ms"`
	MaxMs float64 `json:"max_ms"`
	// The value of the phase's chronologically last event (for an instant, its max).
	LastMs float64 `json:"last_ms"`
}

// rebalancePhases records the rebalance group's events from start() on; before, nothing.
type rebalancePhases struct {
	mu     sync.Mutex
	group  *fleetGroup
	began  time.Time
	on     bool
	events map[string][]phaseEvent
	// Members already told to rejoin: only the first REBALANCE_IN_PROGRESS is the notice.
	noticed map[int]bool
}

func newRebalancePhases(group *fleetGroup) *rebalancePhases {
	return &rebalancePhases{group: group, events: map[string][]phaseEvent{}, noticed: map[int]bool{}}
}

func (p *rebalancePhases) start(began time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.began, p.on = began, true
}

// stop ends recording: the rebalance is complete; later events are another story.
func (p *rebalancePhases) stop(done time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.on {
		p.addLocked(phaseDone, done, float64(done.Sub(p.began).Microseconds())/1000)
	}
	p.on = false
}

func (p *rebalancePhases) recording(m *fleetMember) bool {
	return p != nil && m.group == p.group
}

func (p *rebalancePhases) addLocked(name string, at time.Time, value float64) {
	p.events[name] = append(p.events[name], phaseEvent{at: at.Sub(p.began), value: value})
}

// instant records that m reached a phase at `at`.
func (p *rebalancePhases) instant(m *fleetMember, name string, at time.Time) {
	if !p.recording(m) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.on {
		p.addLocked(name, at, float64(at.Sub(p.began).Microseconds())/1000)
	}
}

// span records an instant phase at `end` and a duration phase (end - begin) with it.
func (p *rebalancePhases) span(m *fleetMember, instant, held string, begin, end time.Time) {
	if !p.recording(m) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.on {
		p.addLocked(instant, end, float64(end.Sub(p.began).Microseconds())/1000)
		p.addLocked(held, end, float64(end.Sub(begin).Microseconds())/1000)
	}
}

// notice records m's first REBALANCE_IN_PROGRESS heartbeat answer, due at `due`.
func (p *rebalancePhases) notice(m *fleetMember, due, answered time.Time) {
	if !p.recording(m) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.on && !p.noticed[m.index] {
		p.noticed[m.index] = true
		p.addLocked(phaseNoticeAnswered, answered, float64(answered.Sub(p.began).Microseconds())/1000)
		p.addLocked(phaseNoticeAfterDue, answered, float64(answered.Sub(due).Microseconds())/1000)
	}
}

func (p *rebalancePhases) report() map[string]phaseSummary {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]phaseSummary{}
	for name, events := range p.events {
		out[name] = summarize(events)
	}
	return out
}

func summarize(events []phaseEvent) phaseSummary {
	values := make([]float32, len(events))
	last := events[0]
	for i, e := range events {
		values[i] = float32(e.value)
		if e.at >= last.at {
			last = e
		}
	}
	sort.Slice(values, func(i, j int) bool { return values[i] < values[j] })
	return phaseSummary{
		Count:  len(events),
		P50Ms:  quantile(values, 0.5),
		MaxMs:  round(float64(values[len(values)-1]), 2),
		LastMs: round(last.value, 2),
	}
}

// serverPhases reads our coordinator's journal for the rebalance group: when (in ms since
// `began`, by the server's clock on the same machine) the rebalance started, the join phase
// ended (generation_started) and the leader's assignment was decided (stable, written in the
// same transaction as the assignment). The last of each at or after `began`.
func serverPhases(client *http.Client, baseURL, admin, group string, began time.Time) (map[string]float64, error) {
	out := map[string]float64{}
	since := 0
	for {
		u := fmt.Sprintf("%s/v1/journal?since=%d&limit=10000", baseURL, since)
		req, _ := http.NewRequest("GET", u, nil)
		req.Header.Set("Authorization", "Bearer "+admin)
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		var page struct {
			Events []struct {
				Kind    string `json:"kind"`
				GroupID string `json:"group_id"`
				TsMs    int64  `json:"ts_ms"`
			} `json:"events"`
			NextSince int `json:"next_since"`
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		for _, e := range page.Events {
			at := time.UnixMilli(e.TsMs)
			if e.GroupID != group || at.Before(began.Truncate(time.Millisecond)) {
				continue
			}
			switch e.Kind {
			case "rebalance_started", "generation_started", "stable":
				out["server_"+e.Kind] = float64(at.Sub(began).Microseconds()) / 1000
			}
		}
		if len(page.Events) == 0 || page.NextSince == since {
			return out, nil
		}
		since = page.NextSince
	}
}
