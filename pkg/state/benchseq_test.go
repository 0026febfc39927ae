package state

var benchSeqs = []struct {
	name string
	fn   journalSeq
}{
	{"legacy", legacySeq},
	{"merged", mergedSeq},
}

// mergedSeq is what podnet does now: pod and first attachment intent in
// one commit, the last attachment's result and ready in one; deleting,
// delete.
func mergedSeq(s *Store, id string) error {
	p := benchPod(id)
	if err := s.PutPod(p); err != nil {
		return err
	}
	a := p.Attachments[0]
	a.Phase, a.Result = AttachDone, benchResult
	if err := s.UpdatePod(id, func(p *Pod) error {
		p.SetAttachment(a)
		p.Phase = PhaseReady
		return nil
	}); err != nil {
		return err
	}
	if _, err := s.GetPod(id); err != nil {
		return err
	}
	if err := s.SetPhase(id, PhaseDeleting, ""); err != nil {
		return err
	}
	return s.DeletePod(id)
}
