//! An object head: the variants under one key and the busy marker of a
//! fetch in progress. Sixteen bytes in the index for the usual head, one
//! object and no fetch; a second variant or a busy marker moves to a box
//! of its own.

use std::sync::Arc;

use crate::cache::{Busy, ObjRef};

#[derive(Default)]
pub(super) struct Head {
    one: Option<ObjRef>,
    more: Option<Box<More>>,
}

#[derive(Default)]
struct More {
    variants: Vec<ObjRef>,
    busy: Option<Arc<Busy>>,
}

impl Head {
    pub fn variants(&self) -> impl Iterator<Item = &ObjRef> + Clone {
        self.one.iter().chain(self.more.iter().flat_map(|m| m.variants.iter()))
    }

    pub fn len(&self) -> usize {
        self.one.is_some() as usize + self.more.as_ref().map_or(0, |m| m.variants.len())
    }

    /// Neither an object nor a fetch: the head can leave the index.
    pub fn idle(&self) -> bool {
        self.one.is_none() && self.more.is_none()
    }

    pub fn busy(&self) -> Option<&Arc<Busy>> {
        self.more.as_ref().and_then(|m| m.busy.as_ref())
    }

    pub fn set_busy(&mut self, busy: Option<Arc<Busy>>) {
        self.more.get_or_insert_with(Box::default).busy = busy;
        self.tidy();
    }

    pub fn push(&mut self, oc: ObjRef) {
        if self.one.is_none() {
            self.one = Some(oc);
        } else {
            self.more.get_or_insert_with(Box::default).variants.push(oc);
        }
    }

    pub fn retain(&mut self, mut keep: impl FnMut(&ObjRef) -> bool) {
        if self.one.as_ref().is_some_and(|o| !keep(o)) {
            self.one = None;
        }
        if let Some(m) = &mut self.more {
            m.variants.retain(&mut keep);
        }
        self.tidy();
    }

    /// Keep the inline place filled and the box only while it holds
    /// something.
    fn tidy(&mut self) {
        if let Some(m) = &mut self.more {
            if self.one.is_none() && !m.variants.is_empty() {
                self.one = Some(m.variants.remove(0));
            }
            if m.variants.is_empty() && m.busy.is_none() {
                self.more = None;
            }
        }
    }
}
