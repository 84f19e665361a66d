//! Asking before a command changes more than one job.

use std::io::{self, BufRead, IsTerminal, Write};

use super::error::CliError;

/// Goes ahead if `yes` (the command's `--yes`), or if the person at the terminal answers
/// `y` or `yes` to `question` (asked on stderr). Without a terminal on stdin, refuses: a
/// script must say `--yes`.
///
/// # Errors
/// [`CliError::NotConfirmed`] when declined or when there is no terminal to ask at.
pub(crate) fn confirm(question: &str, yes: bool) -> Result<(), CliError> {
    let stdin = io::stdin();
    let terminal = stdin.is_terminal();
    confirm_with(
        question,
        yes,
        terminal,
        &mut stdin.lock(),
        &mut io::stderr(),
    )
}

/// [`confirm`], reading the answer from `input` and asking on `prompt`.
fn confirm_with(
    question: &str,
    yes: bool,
    terminal: bool,
    input: &mut impl BufRead,
    prompt: &mut impl Write,
) -> Result<(), CliError> {
    if yes {
        return Ok(());
    }
    if !terminal {
        return Err(CliError::NotConfirmed(
            "refusing to go ahead without confirmation: stdin is not a terminal (pass --yes)",
        ));
    }
    write!(prompt, "{question} [y/N] ")?;
    prompt.flush()?;
    let mut answer = String::new();
    input.read_line(&mut answer)?;
    if matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
        Ok(())
    } else {
        Err(CliError::NotConfirmed("not confirmed: nothing was changed"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(yes: bool, terminal: bool, answer: &str) -> (Result<(), CliError>, String) {
        let mut prompt = Vec::new();
        let result = confirm_with(
            "Delete 3?",
            yes,
            terminal,
            &mut answer.as_bytes(),
            &mut prompt,
        );
        (result, String::from_utf8(prompt).unwrap())
    }

    #[test]
    fn yes_goes_ahead_without_asking() {
        let (result, prompt) = ask(true, false, "");
        assert!(result.is_ok());
        assert_eq!(prompt, "");
    }

    #[test]
    fn without_a_terminal_it_refuses_without_asking() {
        let (result, prompt) = ask(false, false, "y\n");
        assert!(matches!(result, Err(CliError::NotConfirmed(m)) if m.contains("--yes")));
        assert_eq!(prompt, "");
    }

    #[test]
    fn at_a_terminal_only_y_or_yes_goes_ahead() {
        for answer in ["y\n", "YES\n", " yes \n"] {
            let (result, prompt) = ask(false, true, answer);
            assert!(result.is_ok(), "{answer:?}");
            assert_eq!(prompt, "Delete 3? [y/N] ");
        }
        for answer in ["\n", "n\n", "no\n", "", "yess\n"] {
            let (result, _) = ask(false, true, answer);
            assert!(
                matches!(result, Err(CliError::NotConfirmed(m)) if m.contains("nothing")),
                "{answer:?}"
            );
        }
    }
}
