package fsm

import (
	"fmt"

	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// decodeCommand decodes a log entry into cmd with the decoder vtprotobuf
// generated for fsm.proto (fsm_vtproto.pb.go): every node decodes every
// entry it applies, and protobuf-go's table-driven decoder was a sixth of a
// follower's CPU under single submits (docs/benchmarks.md, "The log's
// entries decoded by generated code"). For every encoding protobuf-go's
// Marshal produces, the result is the message protobuf-go's Unmarshal
// makes (TestDecodeCommandAsProtobuf, FuzzDecodeCommand). Two inputs it
// refuses or accepts differently can never be in the log: a string that is
// not UTF-8 (protobuf-go's Marshal, which the proposer uses, refuses to
// write one; this decoder does not check) and a known field with another
// wire type (protobuf-go keeps it as an unknown field, this decoder fails).
func decodeCommand(data []byte, cmd *fsmv1.Command) error { return cmd.UnmarshalVT(data) }

// Envelope wraps a command body with its type and the lease time, so type
// and body can never disagree. It stamps no calendar time (see EnvelopeAt).
func Envelope(nowMs int64, body any) *fsmv1.Command {
	return EnvelopeAt(nowMs, 0, body)
}

// EnvelopeAt is Envelope with both times: nowMs the lease time, calendarMs
// the leader's wall clock (Unix ms, never below a stamp proposed before).
func EnvelopeAt(nowMs, calendarMs int64, body any) *fsmv1.Command {
	c := &fsmv1.Command{NowMs: nowMs, CalendarMs: calendarMs}
	switch b := body.(type) {
	case *fsmv1.Tick:
		c.Type, c.Body = fsmv1.CommandType_COMMAND_TYPE_TICK, &fsmv1.Command_Tick{Tick: b}
	case *fsmv1.Acquire:
		c.Type, c.Body = fsmv1.CommandType_COMMAND_TYPE_ACQUIRE, &fsmv1.Command_Acquire{Acquire: b}
	case *fsmv1.Renew:
		c.Type, c.Body = fsmv1.CommandType_COMMAND_TYPE_RENEW, &fsmv1.Command_Renew{Renew: b}
	case *fsmv1.Release:
		c.Type, c.Body = fsmv1.CommandType_COMMAND_TYPE_RELEASE, &fsmv1.Command_Release{Release: b}
	case *fsmv1.ClaimWindow:
		c.Type, c.Body = fsmv1.CommandType_COMMAND_TYPE_CLAIM_WINDOW, &fsmv1.Command_ClaimWindow{ClaimWindow: b}
	case *fsmv1.CompleteWindow:
		c.Type, c.Body = fsmv1.CommandType_COMMAND_TYPE_COMPLETE_WINDOW, &fsmv1.Command_CompleteWindow{CompleteWindow: b}
	case *fsmv1.FencedCommit:
		c.Type, c.Body = fsmv1.CommandType_COMMAND_TYPE_FENCED_COMMIT, &fsmv1.Command_FencedCommit{FencedCommit: b}
	case *fsmv1.Prune:
		c.Type, c.Body = fsmv1.CommandType_COMMAND_TYPE_PRUNE, &fsmv1.Command_Prune{Prune: b}
	case *fsmv1.SetMember:
		c.Type, c.Body = fsmv1.CommandType_COMMAND_TYPE_SET_MEMBER, &fsmv1.Command_SetMember{SetMember: b}
	case *fsmv1.RemoveMember:
		c.Type, c.Body = fsmv1.CommandType_COMMAND_TYPE_REMOVE_MEMBER, &fsmv1.Command_RemoveMember{RemoveMember: b}
	case *fsmv1.Batch:
		c.Type, c.Body = fsmv1.CommandType_COMMAND_TYPE_BATCH, &fsmv1.Command_Batch{Batch: b}
	case *fsmv1.RegisterJob:
		c.Type, c.Body = fsmv1.CommandType_COMMAND_TYPE_REGISTER_JOB, &fsmv1.Command_RegisterJob{RegisterJob: b}
	case *fsmv1.SubmitJobs:
		c.Type, c.Body = fsmv1.CommandType_COMMAND_TYPE_SUBMIT_JOBS, &fsmv1.Command_SubmitJobs{SubmitJobs: b}
	case *fsmv1.FetchJobs:
		c.Type, c.Body = fsmv1.CommandType_COMMAND_TYPE_FETCH_JOBS, &fsmv1.Command_FetchJobs{FetchJobs: b}
	case *fsmv1.HeartbeatJobs:
		c.Type, c.Body = fsmv1.CommandType_COMMAND_TYPE_HEARTBEAT_JOBS, &fsmv1.Command_HeartbeatJobs{HeartbeatJobs: b}
	case *fsmv1.CompleteJobs:
		c.Type, c.Body = fsmv1.CommandType_COMMAND_TYPE_COMPLETE_JOBS, &fsmv1.Command_CompleteJobs{CompleteJobs: b}
	case *fsmv1.FailJobs:
		c.Type, c.Body = fsmv1.CommandType_COMMAND_TYPE_FAIL_JOBS, &fsmv1.Command_FailJobs{FailJobs: b}
	case *fsmv1.CancelJobs:
		c.Type, c.Body = fsmv1.CommandType_COMMAND_TYPE_CANCEL_JOBS, &fsmv1.Command_CancelJobs{CancelJobs: b}
	case *fsmv1.RetryJobs:
		c.Type, c.Body = fsmv1.CommandType_COMMAND_TYPE_RETRY_JOBS, &fsmv1.Command_RetryJobs{RetryJobs: b}
	case *fsmv1.PutSchedule:
		c.Type, c.Body = fsmv1.CommandType_COMMAND_TYPE_PUT_SCHEDULE, &fsmv1.Command_PutSchedule{PutSchedule: b}
	case *fsmv1.DeleteSchedule:
		c.Type, c.Body = fsmv1.CommandType_COMMAND_TYPE_DELETE_SCHEDULE, &fsmv1.Command_DeleteSchedule{DeleteSchedule: b}
	case *fsmv1.PauseSchedule:
		c.Type, c.Body = fsmv1.CommandType_COMMAND_TYPE_PAUSE_SCHEDULE, &fsmv1.Command_PauseSchedule{PauseSchedule: b}
	case *fsmv1.TriggerSchedule:
		c.Type, c.Body = fsmv1.CommandType_COMMAND_TYPE_TRIGGER_SCHEDULE, &fsmv1.Command_TriggerSchedule{TriggerSchedule: b}
	case *fsmv1.MaterialiseSchedules:
		c.Type, c.Body = fsmv1.CommandType_COMMAND_TYPE_MATERIALISE_SCHEDULES, &fsmv1.Command_MaterialiseSchedules{MaterialiseSchedules: b}
	case *fsmv1.SetQueueTarget:
		c.Type, c.Body = fsmv1.CommandType_COMMAND_TYPE_SET_QUEUE_TARGET, &fsmv1.Command_SetQueueTarget{SetQueueTarget: b}
	case *fsmv1.PauseQueue:
		c.Type, c.Body = fsmv1.CommandType_COMMAND_TYPE_PAUSE_QUEUE, &fsmv1.Command_PauseQueue{PauseQueue: b}
	case *fsmv1.StartBulkJobs:
		c.Type, c.Body = fsmv1.CommandType_COMMAND_TYPE_START_BULK_JOBS, &fsmv1.Command_StartBulkJobs{StartBulkJobs: b}
	case *fsmv1.StepBulkJobs:
		c.Type, c.Body = fsmv1.CommandType_COMMAND_TYPE_STEP_BULK_JOBS, &fsmv1.Command_StepBulkJobs{StepBulkJobs: b}
	case *fsmv1.DeleteJobs:
		c.Type, c.Body = fsmv1.CommandType_COMMAND_TYPE_DELETE_JOBS, &fsmv1.Command_DeleteJobs{DeleteJobs: b}
	case *fsmv1.SetQueueLimits:
		c.Type, c.Body = fsmv1.CommandType_COMMAND_TYPE_SET_QUEUE_LIMITS, &fsmv1.Command_SetQueueLimits{SetQueueLimits: b}
	default:
		panic(fmt.Sprintf("fsm.Envelope: not a command body: %T", body))
	}
	return c
}
