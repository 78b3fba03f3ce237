//! Replicas across processes with MPI (the `mpi` cargo feature): under
//! `mpirun -np P ipuxla run FILE --replicas N`, each process runs N/P replicas and the
//! replicas' collectives cross processes as MPI all-gathers of what every process's
//! replicas brought (the values combine on every process in replica order, so the results
//! are bitwise those of one process). Every exchange first agrees on its tag (the
//! collective's round, or the final gathering of results) and waits at most
//! [`runtime::COLLECTIVE_WAIT_LIMIT`]; a process that is elsewhere or gone stops the job
//! with an error (`MPI_Abort`) instead of a hang.

use mpi::collective::CommunicatorCollectives;
use mpi::datatype::PartitionMut;
use mpi::environment::Universe;
use mpi::topology::{Communicator, SimpleCommunicator};
use runtime::Transport;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// This process's place among the processes `mpirun` started.
pub struct Mpi {
    world: Mutex<SimpleCommunicator>,
    rank: usize,
    size: usize,
    limit: Duration,
    // Finalises MPI when dropped: declared last, so the communicator is dropped first.
    _universe: Universe,
}

// SAFETY: MPI is initialised with `Threading::Serialized` (checked in `from_launcher`): any
// thread may call MPI as long as no two do at once, and every call goes through the
// `world` mutex.
unsafe impl Send for Mpi {}
// SAFETY: as above; `&Mpi` only reaches MPI through the mutex.
unsafe impl Sync for Mpi {}

impl Mpi {
    /// MPI, when `mpirun` (OpenMPI, or a PMI launcher) started this process; `None` when it
    /// runs alone.
    pub fn from_launcher() -> anyhow::Result<Option<Mpi>> {
        let launched = ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"]
            .iter()
            .any(|v| std::env::var_os(v).is_some());
        if !launched {
            return Ok(None);
        }
        let (universe, threading) = mpi::initialize_with_threading(mpi::Threading::Serialized)
            .ok_or_else(|| anyhow::anyhow!("MPI was initialised twice"))?;
        if threading < mpi::Threading::Serialized {
            anyhow::bail!(
                "this MPI offers {threading:?} threading; replicas need Serialized (one thread at a time may call MPI)"
            );
        }
        let world = universe.world();
        let (rank, size) = (world.rank() as usize, world.size() as usize);
        Ok(Some(Mpi {
            world: Mutex::new(world),
            rank,
            size,
            limit: runtime::COLLECTIVE_WAIT_LIMIT,
            _universe: universe,
        }))
    }

    /// Stops every process of the job with `code` (after this one has said why).
    pub fn abort(&self, code: i32) -> ! {
        let world = self.world.lock().unwrap_or_else(|e| e.into_inner());
        world.abort(code)
    }
}

impl Transport for Mpi {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn all_gather(&self, tag: u64, bytes: &[u8]) -> Result<Vec<Vec<u8>>, String> {
        let world = self.world.lock().unwrap_or_else(|e| e.into_inner());
        let n = self.size;
        let deadline = Instant::now() + self.limit;
        // Every process's tag and length first, so that processes at different exchanges
        // are told apart before any data is read.
        let header = [tag, bytes.len() as u64];
        let mut headers = vec![0u64; 2 * n];
        mpi::request::scope(|scope| {
            let request = world.immediate_all_gather_into(scope, &header[..], &mut headers[..]);
            self.finish(&world, request, deadline, tag)
        });
        for p in 0..n {
            if headers[2 * p] != tag {
                return Err(format!(
                    "process {p} is at {} while process {} is at {}: the replicas' programs disagree",
                    exchange_name(headers[2 * p]),
                    self.rank,
                    exchange_name(tag)
                ));
            }
        }
        let counts: Vec<mpi::Count> = (0..n)
            .map(|p| mpi::Count::try_from(headers[2 * p + 1]))
            .collect::<Result<_, _>>()
            .map_err(|_| "a process sends more than 2 GiB in one exchange".to_string())?;
        let displs: Vec<mpi::Count> = counts
            .iter()
            .scan(0, |at, &c| {
                let d = *at;
                *at += c;
                Some(d)
            })
            .collect();
        let total: usize = counts.iter().map(|&c| c as usize).sum();
        let mut all = vec![0u8; total];
        {
            let mut partition = PartitionMut::new(&mut all[..], &counts[..], &displs[..]);
            mpi::request::scope(|scope| {
                let request =
                    world.immediate_all_gather_varcount_into(scope, bytes, &mut partition);
                self.finish(&world, request, deadline, tag)
            });
        }
        Ok((0..n)
            .map(|p| {
                let at = displs[p] as usize;
                all[at..at + counts[p] as usize].to_vec()
            })
            .collect())
    }
}

/// What an exchange is, by its tag.
fn exchange_name(tag: u64) -> String {
    if tag == crate::replicas::RESULTS_TAG {
        "the gathering of results".into()
    } else {
        format!("collective round {}", tag + 1)
    }
}

impl Mpi {
    /// Waits for `request` until `deadline`; past it, stops the job: a process that never
    /// comes would otherwise hold every other one forever.
    fn finish<'a, R: ?Sized, S: mpi::request::Scope<'a>>(
        &self,
        world: &SimpleCommunicator,
        mut request: mpi::request::Request<'a, R, S>,
        deadline: Instant,
        tag: u64,
    ) {
        loop {
            match request.test() {
                Ok(_) => return,
                Err(pending) => request = pending,
            }
            if Instant::now() >= deadline {
                eprintln!(
                    "error: process {} waited {:.0} s for the other processes at {}; stopping the job",
                    self.rank,
                    self.limit.as_secs_f64(),
                    exchange_name(tag)
                );
                world.abort(3);
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}
