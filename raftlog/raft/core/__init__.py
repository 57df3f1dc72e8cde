"""A pure Raft state machine for one group, in the shape of etcd's raft (issue 27).

No I/O, no clock, no threads: `tick()` is one logical time unit, `step(message)` takes a peer's
message, `propose(data)` appends on the leader. Each only changes state; `ready()` then says
what to do (hard state and entries to persist, messages to send, committed entries to apply)
and `advance(ready)` tells the core they were made durable. The caller's one rule: a Ready's
messages leave only after its hard state and entries are durable.

Every rule of raftlog/raft/FORK.md that belongs to a core is a named method of `Raft`, and each
can be switched off through `Rules` so the tests can show what breaks without it:
FORK 1 `follower_commit`, 2 `append_matching`, 3 `campaign` (PreVote) and `in_lease`
(stickiness; a transfer's requests pass it), 4 `stale_term_answer`, 5 `check_quorum` (and the
Ready's soft state, by which the caller fails a deposed leader's waiters), 6 `propose`
(refuses on a follower), 8 `reject_hint` / `handle_reject` / `find_conflict_by_term`,
9 `caught_up`, `quiesce`, `quiet_acked`, `wake`, `concerns` (quiet groups; off with
Config.quiesce_ticks=0),
10 `heard_from`, TimeoutNow `transfer_leadership`; Raft 5.4.2 `leader_commit`. FORK 7 is
`send_snapshot` / `handle_snapshot` / `install_done`: a follower that needs entries its leader
compacted installs the leader's snapshot point, which the caller fetches (for a partition, the
segment data up to that entry) while the core waits. FORK 11 (heartbeats without the handler)
is the driver's: one frame per peer per loop turn; the election budget (FORK 9's) is the
driver's too, asked through `wants_election` / `tick(may_stand)`.

The modules, from the bottom up: `values` (messages, entries, states, the Ready), `log` (the
RaftLog seam and MemoryLog), `rules` (Config and Rules). `Raft` is one class built in layers,
each a subclass of the one below that calls only down: `state.State` (term, vote, log, the
configuration the log holds, and the edits every rule makes through), `replication`
(appends and snapshots, both sides), `conf_change` (membership change and the leader's
commit), `votes` (elections), `liveness` (ticks, the lease, stickiness, quiet groups) and
`raft.Raft` (messages in, proposals, the caller's loop).
"""
