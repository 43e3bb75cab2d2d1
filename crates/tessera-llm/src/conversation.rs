//! A chat: messages rendered through the model's [`ChatTemplate`] into the
//! tokens of the next assistant turn. Each turn re-renders the whole
//! conversation (templates may change earlier text, e.g. drop a thinking
//! block) and evaluates only what differs from the tokens the session
//! already holds: the common prefix stays in the KV cache.

use tessera::{Error, Result};

use crate::chat::{ChatTemplate, Message};
use crate::session::Session;
use crate::tokenizer::Vocab;

/// The messages so far and the tokens evaluated for them.
#[derive(Debug)]
pub struct Conversation {
    template: ChatTemplate,
    messages: Vec<Message>,
    /// The tokens the session holds, in order (its first `n_past`).
    held: Vec<u32>,
}

impl Conversation {
    /// An empty conversation through `template`.
    pub fn new(template: ChatTemplate) -> Conversation {
        Conversation {
            template,
            messages: Vec::new(),
            held: Vec::new(),
        }
    }

    /// The messages so far.
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// The template.
    pub fn template(&self) -> &ChatTemplate {
        &self.template
    }

    /// Add a message (`system` first, then `user` / `assistant` turns).
    pub fn push(&mut self, message: Message) {
        self.messages.push(message);
    }

    /// The tokens of the whole conversation followed by the assistant's
    /// turn header, as the template renders them (special tokens parsed;
    /// BOS added when the vocabulary wants one and the text has none).
    pub fn render_tokens(&self, vocab: &Vocab) -> Result<Vec<u32>> {
        let text = self.template.render(&self.messages, true)?;
        let has_bos = vocab
            .bos()
            .and_then(|b| vocab.token_text(b))
            .is_some_and(|b| !b.is_empty() && text.starts_with(b));
        Ok(vocab.tokenize(&text, !has_bos, true))
    }

    /// The tokens to evaluate for the next assistant turn: the session is
    /// cut back to the longest prefix it shares with the rendered
    /// conversation, and the rest is returned (at least one token, so that
    /// there are logits to sample from).
    pub fn next_prompt(&mut self, vocab: &Vocab, session: &mut Session) -> Result<Vec<u32>> {
        let full = self.render_tokens(vocab)?;
        if full.is_empty() {
            return Err(Error::InvalidLayout(
                "the chat template rendered no tokens".into(),
            ));
        }
        self.held.truncate(session.n_past());
        let common = self
            .held
            .iter()
            .zip(&full)
            .take_while(|(a, b)| a == b)
            .count()
            .min(full.len() - 1);
        // A sliding-window ring may keep fewer (none).
        let kept = session.truncate(common);
        self.held.truncate(kept);
        Ok(full[kept..].to_vec())
    }

    /// Record the assistant's reply: the `prompt` tokens and `generated`
    /// tokens that went through the session (as many as it now holds), and
    /// the reply's text as the next message.
    pub fn record_reply(
        &mut self,
        session: &Session,
        prompt: &[u32],
        generated: &[u32],
        text: &str,
    ) {
        self.held.extend_from_slice(prompt);
        self.held.extend_from_slice(generated);
        self.held.truncate(session.n_past());
        self.messages.push(Message::new("assistant", text));
    }
}
