package fsm

// Reads return copies of records; callers may keep them.

// Lease returns the lease record and the cluster time it was read at.
func (f *FSM) Lease(name string) (Lease, int64, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	l := f.st.lease(name)
	if l == nil {
		return Lease{}, f.st.clock, false
	}
	return *l, f.st.clock, true
}

// Leases lists up to limit leases whose name has prefix, starting at the
// first name >= after (exclusive of after itself). more reports whether
// further leases follow.
func (f *FSM) Leases(prefix, after string, limit int) (out []Lease, more bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	start := prefix
	if after > start {
		start = after
	}
	f.st.leases.AscendGreaterOrEqual(&Lease{Name: start}, func(l *Lease) bool {
		if len(l.Name) < len(prefix) || l.Name[:len(prefix)] != prefix {
			return false
		}
		if l.Name == after {
			return true
		}
		if len(out) == limit {
			more = true
			return false
		}
		out = append(out, *l)
		return true
	})
	return out, more
}

// LiveLeases counts leases held at cluster time now. O(n): for metrics.
func (f *FSM) LiveLeases(now int64) int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	n := 0
	f.st.leases.Ascend(func(l *Lease) bool {
		if l.Live(now) {
			n++
		}
		return true
	})
	return n
}

// Window returns one window record.
func (f *FSM) Window(job, window string) (Window, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	w := f.st.window(job, window)
	if w == nil {
		return Window{}, false
	}
	return *w, true
}

// Windows lists up to limit windows of job after the window key after.
func (f *FSM) Windows(job, after string, limit int) (out []Window, more bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	f.st.windows.AscendGreaterOrEqual(&Window{Job: job, Window: after}, func(w *Window) bool {
		if w.Job != job {
			return false
		}
		if after != "" && w.Window == after {
			return true
		}
		if len(out) == limit {
			more = true
			return false
		}
		out = append(out, *w)
		return true
	})
	return out, more
}

// Resource returns the fence state of a resource.
func (f *FSM) Resource(name string) (Resource, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	r := f.st.resource(name)
	if r == nil {
		return Resource{}, false
	}
	return *r, true
}

// Members returns the known gRPC addresses by server id, sorted by id.
func (f *FSM) Members() []Member {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []Member
	f.st.members.Ascend(func(m *Member) bool {
		out = append(out, *m)
		return true
	})
	return out
}

// Counts reports the number of records per family.
func (f *FSM) Counts() (leases, windows, resources, idempotency int) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.leases.Len(), f.st.windows.Len(), f.st.resources.Len(), f.st.idem.Len()
}
