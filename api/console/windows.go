package console

import (
	"net/http"
	"net/url"
	"strings"

	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// windowPage is the windows page's size.
const windowPage = 100

type windowsData struct {
	Job     string
	Windows []*coordv1.Window
	pager
}

// windowsPage lists a job's window ledger: who claimed each window, its
// attempts, whether it completed (Coordinator.ListWindows, paged; a job
// is named: there is no list of every job's windows).
func (c *Console) windowsPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := windowsData{Job: q.Get("job")}
	if d.Job == "" {
		c.render(w, r, http.StatusOK, "windows", "Windows", d, nil)
		return
	}
	tok := q.Get("page_token")
	resp, err := c.b.Coordinator.ListWindows(r.Context(), &coordv1.ListWindowsRequest{Job: d.Job, PageToken: tok, PageSize: windowPage})
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	d.Windows, d.pager = resp.GetWindows(), newPager("/ui/windows", url.Values{"job": {d.Job}}, tok, resp.GetNextPageToken())
	c.render(w, r, http.StatusOK, "windows", "Windows", d, nil)
}

// windowState is a window's state as shown: "completed".
func windowState(s coordv1.WindowState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "WINDOW_STATE_"))
}

type workersData struct {
	Queue string
	*coordv1.QueueWorkersResponse
}

// workersPage shows who runs what (Queue.Workers): each worker with the
// identity that fetched, its running attempts and since when.
func (c *Console) workersPage(w http.ResponseWriter, r *http.Request) {
	d := workersData{Queue: r.URL.Query().Get("queue")}
	resp, err := c.b.Queue.Workers(r.Context(), &coordv1.QueueWorkersRequest{Queue: d.Queue})
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	d.QueueWorkersResponse = resp
	c.render(w, r, http.StatusOK, "workers", "Workers", d, nil)
}
