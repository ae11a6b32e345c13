package notify

// AllKeys are every key one activity touches, for the slot test.
func (f *Feed) AllKeys(a Activity) []string {
	ks := f.keys(a.Target)
	gid := groupID(a.Verb, a.Object, f.bucket(a.Time))
	return []string{f.space.Key(userTag(a.Target), "id", a.ID), ks.groups, ks.data, ks.unseen, ks.unread, ks.seq, f.actorsKey(a.Target, gid)}
}

// SeqKey is user's update counter: the number of activities applied.
func (f *Feed) SeqKey(user string) string { return f.keys(user).seq }

// GroupID is the id of a's group.
func (f *Feed) GroupID(a Activity) string { return groupID(a.Verb, a.Object, f.bucket(a.Time)) }
