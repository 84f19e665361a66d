//! The struct takes the function's visibility; `#[cfg]` applies to everything generated.
#![deny(warnings)]

mod jobs {
    use harel_jobs::job;

    /// Crate-visible.
    #[job]
    pub(crate) async fn reindex(r#type: String, mut attempts: u32) {
        attempts += 1;
        let _ = (r#type, attempts);
    }

    /// Compiled out: neither the function nor its struct exist.
    #[cfg(any())]
    #[job]
    pub async fn never(n: u32) {
        let _ = n;
    }

    /// Compiled in.
    #[cfg(all())]
    #[job]
    pub async fn always(n: u32) {
        let _ = n;
    }
}

// A type of the user named like an expansion generic does not get shadowed.
#[allow(dead_code)]
struct S;

#[harel_jobs::job]
async fn uses_s(n: u32) -> Result<(), std::io::Error> {
    let _ = n;
    Ok(())
}

fn main() {
    let _ = jobs::Reindex {
        r#type: "all".into(),
        attempts: 0,
    };
    let _ = jobs::Always { n: 1 };
    let _ = UsesS { n: 1 };
}
