//! The migration pass: which tiers drain, coldest files first, over
//! `migration_threads` workers; eviction of clean PM copies.

use super::*;

/// One drain of a tier (`Fs::drain`), shared by its worker threads.
#[derive(Clone, Copy)]
pub(super) struct Drain<'a> {
    from: TierId,
    to: TierId,
    /// Bytes to move.
    goal: u64,
    mode: Mode,
    params: &'a mig::MigrationParams,
    policy: &'a (dyn mig::MigrationPolicy + Send + Sync),
    /// The coldest files, coldest first.
    files: &'a [(u64, Ino)],
    /// Next file to hand out, and bytes claimed so far (one lock: files are
    /// chosen and claimed in coldness order).
    picker: &'a Mutex<(usize, u64)>,
    /// Bytes committed by every worker.
    moved: &'a AtomicU64,
    /// A worker failed: the others stop.
    failed: &'a AtomicBool,
    /// Files pinned to `from` by a rule move too (PM yielding to metadata,
    /// `rules.rs`); otherwise they are passed over.
    pinned_too: bool,
}

impl Fs {
    /// One migration pass: drain each tier above its threshold into the next
    /// one, then reverse-migrate read-hot data when reads dominate. Returns
    /// the bytes moved.
    pub fn migration_pass(&self) -> u64 {
        if self.is_frozen() {
            return 0; // a read-only remount: nothing moves (`freeze.rs`)
        }
        let (params, policy, np) = {
            let st = self.settings.read();
            (st.migration_params(), st.migration(), st.nvmfs_params())
        };
        let Ok(policy) = policy else { return 0 };
        let io = self.io_counters();
        let mut chain: Vec<TierId> = vec![TierId::PM];
        chain.extend(self.tiers.iter().map(|t| t.id));
        let mut moved = 0;
        let mut pm_split = (0, 0);
        for w in chain.windows(2) {
            let (from, to) = (w[0], w[1]);
            if from.is_pm() {
                if self.pm_drain_waits() {
                    continue;
                }
                self.migrator.pm_looks.fetch_add(1, Ordering::Relaxed);
            }
            // PM's threshold is Ziggurat's (dynamic by default); a block
            // tier's is fixed (`migration_block_threshold`).
            let threshold = if from.is_pm() {
                mig::migration_threshold(params.threshold, io)
            } else {
                params.block_threshold
            };
            let bit = 1u64 << from.get();
            let running = self.migrator.running.load(Ordering::Relaxed) & bit != 0;
            let (mut used, cap) = self.drain_use(from);
            let mut counted = used;
            if from.is_pm() {
                let evict_mark = u64::from(threshold) + (100 - u64::from(threshold)) / 2;
                // The clean/dirty split (running totals, `pm_clean_dirty`)
                // is taken only when it can change what this pass does:
                // NVMFS's flush, PM past the eviction mark, or PM's whole
                // data use (an upper bound of what counts) over the
                // threshold. Otherwise nothing moves either way, and the
                // percent shown is that bound.
                let split_matters = policy.flushes_dirty_list()
                    || u128::from(used) * 100 > u128::from(cap) * u128::from(evict_mark)
                    || mig::should_migrate(used, cap, threshold, params.forced_percent, running)
                        .is_needed();
                if split_matters {
                    pm_split = self.pm_clean_dirty();
                }
                let clean = pm_split.0 * BS;
                // Room for foreground writes: dropping the PM side of clean
                // data costs no copy, so it goes first once PM passes the
                // eviction mark (halfway between threshold and full).
                if clean > 0 && u128::from(used) * 100 > u128::from(cap) * u128::from(evict_mark) {
                    let goal = used.saturating_sub(cap / 100 * u64::from(threshold));
                    let freed = self.drain(from, to, goal, &params, &*policy, Mode::Evict);
                    moved += freed;
                    used = self.tier_use(TierId::PM).0;
                    if freed > 0 {
                        pm_split = self.pm_clean_dirty();
                    }
                }
                // With clean copies kept, only dirty data counts toward the
                // threshold: the rest can be dropped at any time.
                let probe = mig::CopyObservation {
                    need: MigrationNeed::Background { bytes_to_free: 0 },
                    pm_used: used,
                    pm_capacity: cap,
                };
                if policy.keep_clean_copy(&probe) {
                    counted = used.saturating_sub(pm_split.0 * BS);
                }
            }
            if from.is_pm() {
                self.migrator
                    .pm_counted_percent
                    .store(counted * 100 / cap.max(1), Ordering::Relaxed);
            }
            let need = mig::should_migrate(counted, cap, threshold, params.forced_percent, running);
            // NVMFS keeps PM's dirty data between its own marks (the flush
            // below); the migration threshold applies to it only when forced.
            let own_marks = from.is_pm() && policy.flushes_dirty_list() && !need.is_forced();
            if need.is_needed() && !own_marks {
                self.migrator.running.fetch_or(bit, Ordering::Relaxed);
                let obs = mig::CopyObservation {
                    need,
                    pm_used: used,
                    pm_capacity: cap,
                };
                // A next tier whose device is full (`device_full.rs`) is
                // passed over for the first one below it that takes writes:
                // PM keeps draining (its room is for the writes that wait
                // on it). Data moves there plainly: clean copies are kept
                // on the next tier only.
                let below = self.drain_target(to, params.forced_percent);
                let mode = if from.is_pm() && below == to && policy.keep_clean_copy(&obs) {
                    Mode::Copy
                } else {
                    Mode::Move
                };
                let to = below;
                *self.migrator.last_reason.lock() = format!(
                    "tier {from} at {}% of capacity, threshold {threshold}%{}{}",
                    counted * 100 / cap.max(1),
                    if need.is_forced() { " (forced)" } else { "" },
                    if mode == Mode::Copy {
                        " (clean copies kept on PM)"
                    } else {
                        ""
                    }
                );
                let here = self.drain(from, to, need.bytes_to_free(), &params, &*policy, mode);
                moved += here;
                self.note_drain_result(from, to, here);
                if from.is_pm() {
                    let key = self.room_key();
                    self.migrator
                        .pm_idle
                        .lock()
                        .turn(Instant::now(), here > 0, key);
                }
            } else {
                self.migrator.running.fetch_and(!bit, Ordering::Relaxed);
                if from.is_pm() {
                    *self.migrator.waiting.lock() = Stall::default();
                    self.migrator.pm_idle.lock().reset();
                }
            }
            if from.is_pm() && policy.flushes_dirty_list() {
                moved += self.nvmfs_flush(to, cap, pm_split, &np);
            }
        }
        // Logs of cold files leave PM when data moving was not enough.
        let need = self.log_migration_need(mig::migration_threshold(params.threshold, io));
        moved += self.migrate_logs(need);
        // Still no room on PM for metadata: data pinned there gives way.
        moved += self.yield_pm_pins_to_metadata();
        moved += self.reverse_pass(io, &params);
        if !self.ruled.lock().inos.is_empty() {
            moved += self.enforce_rules();
        }
        self.clean_pass();
        moved
    }

    /// Where a drain writes: the next tier `next`, unless that tier cannot
    /// take it and a tier further down can (the first such). A tier cannot
    /// when its device is full (`device_full.rs`) or when it is past the
    /// forced mark (`forced_percent`, counted as [`Fs::drain_use`] does),
    /// as foreground writes pass over it then: an SSD full of data a rule
    /// pins there cannot drain itself, and PM, draining into it, stalled
    /// with the HDD below empty (creates failed with ENOSPC, 2026-12-07,
    /// `block_threshold.rs`).
    fn drain_target(&self, next: TierId, forced_percent: u8) -> TierId {
        let past_forced = |id: TierId| {
            let (used, cap) = self.drain_use(id);
            forced_percent < 100
                && u128::from(used) * 100 >= u128::from(cap) * u128::from(forced_percent)
        };
        let cannot_take =
            |id: TierId| self.tier(id).is_ok_and(|t| t.full.is_full()) || past_forced(id);
        if !cannot_take(next) {
            return next;
        }
        self.tiers
            .iter()
            .skip_while(|t| t.id != next)
            .skip(1)
            .find(|t| t.stands_in_for_a_full_tier() && !past_forced(t.id))
            .map_or(next, |t| t.id)
    }

    /// Used and total data bytes of tier `id` as its drain counts them:
    /// [`Fs::tier_use`], and for a block tier all but its free blocks. A
    /// block tier never overwrites in place: blocks freed in a used extent
    /// are dead until recycling and take no data meanwhile, so what it
    /// cannot take counts as used (the recycling reserve too). Counted as
    /// valid data alone, an SSD at 87 % with no room left did not drain,
    /// and PM's drain into it met ENOSPC (`test_s3_cascade.py`).
    fn drain_use(&self, id: TierId) -> (u64, u64) {
        let (used, cap) = self.tier_use(id);
        match self.tiers.iter().find(|t| t.id == id) {
            Some(t) => (
                used.max(cap.saturating_sub(t.space.free_blocks() * BS)),
                cap,
            ),
            None => (used, cap),
        }
    }

    /// Whether PM's look (its split and drain) waits this pass: its last drain
    /// found nothing it may move, no tier's room has changed since, and the
    /// back-off is not over (the status keeps saying why it waits).
    fn pm_drain_waits(&self) -> bool {
        // The key is read before the back-off's lock (a leaf).
        let key = self.room_key();
        !self.migrator.pm_idle.lock().due(Instant::now(), key)
    }

    pub(super) fn io_counters(&self) -> IoCounters {
        IoCounters {
            reads: self.counters.reads.load(Ordering::Relaxed),
            writes: self.counters.writes.load(Ordering::Relaxed),
        }
    }

    /// Moves cold data from `from` to `to` until `goal` bytes moved or no
    /// candidate is left. Files a rule pins to `from` stay.
    pub(crate) fn drain(
        &self,
        from: TierId,
        to: TierId,
        goal: u64,
        params: &mig::MigrationParams,
        policy: &(dyn mig::MigrationPolicy + Send + Sync),
        mode: Mode,
    ) -> u64 {
        self.drain_with(from, to, goal, params, policy, mode, false)
    }

    /// [`Fs::drain`], taking files a rule pins to `from` too when
    /// `pinned_too` (coldest first, pinned or not).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn drain_with(
        &self,
        from: TierId,
        to: TierId,
        goal: u64,
        params: &mig::MigrationParams,
        policy: &(dyn mig::MigrationPolicy + Send + Sync),
        mode: Mode,
        pinned_too: bool,
    ) -> u64 {
        // Into an object tier each window is one upload: at least one object
        // batch moves, in windows of one batch (policy `object_batch`).
        let object_segment = self
            .tiers
            .iter()
            .find(|t| t.id == to && t.kind == terrace_format::TierKind::S3)
            .map(|t| t.space.extent_blocks() * BS);
        let goal = match object_segment {
            Some(seg) if mode != Mode::Evict => {
                mig::object_drain_goal(goal, self.tier_use(from).1, seg)
            }
            _ => goal,
        };
        let files = self.coldest_files(from, mode, 256);
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        // Into an object tier one worker: a window is one upload whose PUTs
        // run in parallel anyway, and two workers' windows would cut each
        // other's runs into more, smaller objects.
        let workers = match object_segment {
            Some(_) => 1,
            None => params.threads_for(cpus).clamp(1, files.len().max(1)),
        };
        // Files are handed out coldest first; each worker moves whole files,
        // so two workers never work on the same file. The picker (next file,
        // bytes claimed so far) is one lock: files are chosen and claimed in
        // coldness order, and none once the claims reach the goal, so
        // parallel workers move exactly the files one worker would.
        let picker = Mutex::new(Rank::DrainPicker, (0usize, 0u64));
        let moved = AtomicU64::new(0);
        let failed = AtomicBool::new(false);
        // Moves are synced and committed in windows (see `MoveBatch`): a
        // quarter of the goal, so space on the source is freed as the pass
        // goes, at least one group and at most MOVE_SYNC_WINDOW_BYTES (into
        // an object tier: one batch, see above).
        let window = match object_segment {
            Some(seg) => mig::object_drain_window(goal, seg),
            None => (goal / 4)
                .max(params.group_blocks() * BS)
                .min(MOVE_SYNC_WINDOW_BYTES),
        };
        let drain = Drain {
            from,
            to,
            goal,
            mode,
            params,
            policy,
            files: &files,
            picker: &picker,
            moved: &moved,
            failed: &failed,
            pinned_too,
        };
        let work = || {
            let mut batch = MoveBatch::new(self, window);
            let mut counted = 0u64;
            self.drain_files(&mut batch, &mut counted, &drain);
            let (total, r) = batch.finish();
            moved.fetch_add(total - counted, Ordering::Relaxed);
            if let Err(e) = r {
                *self.migrator.last_failure.lock() = Some(crate::types::describe(&e));
                failed.store(true, Ordering::Relaxed);
            }
        };
        if workers == 1 {
            work();
        } else {
            std::thread::scope(|sc| {
                for _ in 0..workers {
                    sc.spawn(work);
                }
            });
        }
        let claimed = picker.into_inner().1;
        let moved = moved.into_inner();
        if moved == 0
            && claimed == 0
            && mode != Mode::Evict
            && !failed.into_inner()
            && !params.whole_when_uniform
        {
            // Nothing among the coldest files had a cold part: a second
            // round takes files written at one time whole
            // (`MigrationParams::whole_when_uniform`).
            let second = mig::MigrationParams {
                whole_when_uniform: true,
                ..*params
            };
            return self.drain_with(from, to, goal, &second, policy, mode, pinned_too);
        }
        moved
    }

    /// One drain worker's loop: takes the next coldest file until the goal is
    /// claimed or met, and adds its chosen data to `batch`.
    pub(super) fn drain_files(&self, batch: &mut MoveBatch<'_>, counted: &mut u64, d: &Drain<'_>) {
        let Drain {
            from,
            to,
            goal,
            mode,
            params,
            policy,
            files,
            picker,
            moved,
            failed,
            pinned_too,
        } = *d;
        let now = now_ns().max(0) as u64;
        // Publishes what the batch committed so far.
        let publish = |batch: &MoveBatch<'_>, counted: &mut u64| {
            let m = batch.moved();
            moved.fetch_add(m - *counted, Ordering::Relaxed);
            *counted = m;
        };
        loop {
            if moved.load(Ordering::Relaxed) >= goal
                || failed.load(Ordering::Relaxed)
                || self.migrator.worker.stopping()
            {
                return;
            }
            // Pick the next file with something to move, and claim it.
            let (ino, entries) = {
                let mut pk = picker.lock();
                loop {
                    let k = pk.0;
                    pk.0 += 1;
                    let Some(&(_, ino)) = files.get(k) else {
                        return;
                    };
                    if self.is_commanded(ino) {
                        // A `migrate` command is moving it.
                        continue;
                    }
                    let file = {
                        let Ok(g) = self.lock(ino) else { continue };
                        let i = g.as_ref().expect("live");
                        if !pinned_too && self.rule_of(i) == Some(from) {
                            // Pinned to this tier by its rule: it stays.
                            continue;
                        }
                        FileSnapshot {
                            ino,
                            mtime_ns: i.attr.mtime.max(0) as u64,
                            amtime_ns: i.amtime.value(),
                            entries: snapshot_entries(i),
                        }
                    };
                    let entries: Vec<EntrySnapshot> = if mode == Mode::Evict {
                        // Clean data is evicted wherever it is in the file:
                        // it costs nothing and its copy serves later reads.
                        file.entries
                            .iter()
                            .filter(|e| e.tier == from)
                            .copied()
                            .collect()
                    } else {
                        policy.choose(&file, from, now, params).entries
                    };
                    let bytes: u64 = entries.iter().map(|e| e.blocks * BS).sum();
                    if bytes == 0 {
                        continue;
                    }
                    if mode != Mode::Evict {
                        if pk.1 >= goal {
                            return;
                        }
                        pk.1 += bytes;
                    }
                    break (ino, entries);
                }
            };
            let gb = params.group_blocks();
            for group in mig::batch_groups(&mig::group_entries(&entries, gb), gb) {
                if mode == Mode::Evict && moved.load(Ordering::Relaxed) >= goal {
                    break;
                }
                let ranges: Vec<(FileBlock, u64)> = group
                    .iter()
                    .map(|g| (FileBlock(g.file_block), g.blocks))
                    .collect();
                let r = batch.add(ino, from, to, &ranges, mode);
                publish(batch, counted);
                if r.as_ref()
                    .is_err_and(|e| e.raw_os_error() == Some(libc::ENOENT))
                {
                    // Deleted since it was picked: nothing left to move.
                    break;
                }
                if let Err(e) = r {
                    // Target full or failing: try again next pass.
                    *self.migrator.last_failure.lock() = Some(crate::types::describe(&e));
                    failed.store(true, Ordering::Relaxed);
                    return;
                }
            }
        }
    }

    /// Records what a drain of `from` achieved: nothing moved while the tier
    /// is over its threshold is a stall, said in words at once (status) and
    /// queued for the daemon's log once it has lasted [`STALL_LOG_AFTER`];
    /// moving again clears it (and says so in the log when the stall was
    /// logged).
    pub(super) fn note_drain_result(&self, from: TierId, to: TierId, moved: u64) {
        let m = &self.migrator;
        let failure = m.last_failure.lock().take();
        // `waiting` and `notices` are both leaves: the notice is queued
        // after `waiting` is released.
        let notice = {
            let mut w = m.waiting.lock();
            if moved > 0 {
                let logged = w.logged;
                *w = Stall::default();
                logged.then(|| format!("migration from tier {from} moves data again"))
            } else {
                let to_full = self.tier(to).is_ok_and(|t| t.full.is_full());
                w.why = match failure {
                    Some(_) if to_full => format!(
                        "moves from tier {from} to tier {to} wait: tier {to}'s device, or the file system holding its image, is full"
                    ),
                    Some(e) => format!("moves from tier {from} to tier {to} fail: {e}"),
                    None => format!(
                        "nothing on tier {from} can move to tier {to} (data pinned there by rules, only in the DRAM cache, or being moved by `terrace migrate`)"
                    ),
                };
                let now = Instant::now();
                let since = *w.since.get_or_insert(now);
                (!w.logged && now.duration_since(since) >= STALL_LOG_AFTER).then(|| {
                    w.logged = true;
                    format!("migration stalled: {}", w.why)
                })
            }
        };
        if let Some(n) = notice {
            m.notices.lock().push(n);
        }
    }

    /// Drops the PM side of clean data (data with a copy on the first block
    /// tier), coldest files first, until `goal` bytes are freed. No data is
    /// copied. Returns the bytes freed.
    pub fn evict_clean(&self, goal: u64) -> u64 {
        let Some(to) = self.tiers.first().map(|t| t.id) else {
            return 0;
        };
        let (params, policy) = {
            let st = self.settings.read();
            (st.migration_params(), st.migration())
        };
        let Ok(policy) = policy else { return 0 };
        self.drain(TierId::PM, to, goal, &params, &*policy, Mode::Evict)
    }
}
