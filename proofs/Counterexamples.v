(* The deliberately wrong statements of proofs/negative/ are not merely
   unproved: their negations are proved here, so no proof of them exists
   (Coq being consistent).  Each is a plausible slip in a lemma of
   spec/rules.md. *)
From Coq Require Import Reals Lra Lia List Arith Bool.
From MaxK Require Import Sums Counting Classes Exact SubcubicGap Rowdiff FamilyGap.
Import ListNotations.
Open Scope R_scope.

(** Lemma E2 with the lower weight w^- for every sign of x_bar (the
    deliberate break of exact's sign case). *)
Definition E2_lower_end_every_sign : Prop :=
  forall (k : nat) (w wlo whi x xb : nat -> R),
  (forall i, (i < k)%nat -> 0 <= wlo i /\ wlo i <= w i <= whi i) ->
  (forall i, (i < k)%nat -> x i <= xb i) ->
  sumR (fun i => wlo i * xb i) k < 0 ->
  sumR (fun i => w i * x i) k < 0.

Theorem E2_lower_end_every_sign_false : ~ E2_lower_end_every_sign.
Proof.
  intros H.
  (* position 0: x = x_bar = 1 with w^- = 0 < w = 1; position 1: x = x_bar = -1/2, w = 1 *)
  specialize (H 2%nat (fun _ => 1) (fun i => if (i =? 0)%nat then 0 else 1) (fun _ => 1)
                (fun i => if (i =? 0)%nat then 1 else -1/2)
                (fun i => if (i =? 0)%nat then 1 else -1/2)).
  simpl in H.
  assert (H1 : forall i, (i < 2)%nat ->
            0 <= (if (i =? 0)%nat then 0 else 1) /\
            (if (i =? 0)%nat then 0 else 1) <= 1 <= 1).
  { intros i _. destruct (i =? 0)%nat; lra. }
  specialize (H H1 (fun i _ => Rle_refl _) ltac:(lra)). lra.
Qed.

(** ... and with the upper weight w^+ for every sign. *)
Definition E2_upper_end_every_sign : Prop :=
  forall (k : nat) (w wlo whi x xb : nat -> R),
  (forall i, (i < k)%nat -> 0 <= wlo i /\ wlo i <= w i <= whi i) ->
  (forall i, (i < k)%nat -> x i <= xb i) ->
  sumR (fun i => whi i * xb i) k < 0 ->
  sumR (fun i => w i * x i) k < 0.

Theorem E2_upper_end_every_sign_false : ~ E2_upper_end_every_sign.
Proof.
  intros H.
  (* position 0: x = x_bar = 1, w = 1; position 1: x = x_bar = -1, w = 1/2 < w^+ = 2 *)
  specialize (H 2%nat (fun i => if (i =? 0)%nat then 1 else 1/2)
                (fun i => if (i =? 0)%nat then 1 else 1/2)
                (fun i => if (i =? 0)%nat then 1 else 2)
                (fun i => if (i =? 0)%nat then 1 else -1)
                (fun i => if (i =? 0)%nat then 1 else -1)).
  simpl in H.
  assert (H1 : forall i, (i < 2)%nat ->
            0 <= (if (i =? 0)%nat then 1 else 1/2) /\
            (if (i =? 0)%nat then 1 else 1/2) <= (if (i =? 0)%nat then 1 else 1/2)
              <= (if (i =? 0)%nat then 1 else 2)).
  { intros i _. destruct (i =? 0)%nat; lra. }
  specialize (H H1 (fun i _ => Rle_refl _) ltac:(lra)). lra.
Qed.

(** subcubic_gap's count with the paper's strict compatibility (tokens
    t < m - g, i.e. m - t > g) but the count m - g + 1: an over-count.
    v = 2, k = 2, q = m = 1, c = 1, g = 1: no sequence, claimed 1. *)
Definition gap_strict_overcount : Prop :=
  forall v n q m c g,
  (1 <= n)%nat -> (q <= m)%nat -> (m < v)%nat -> (c <= cmax q m n)%nat -> (1 <= g <= m)%nat ->
  length (filter (fun t => cls_is q m c t && covered m (seq 0 (m - g)) (tl t)) (seqs v (S n)))
  = (choose n c * (m - g + 1) ^ c)%nat.

Theorem gap_strict_overcount_false : ~ gap_strict_overcount.
Proof.
  intros H. specialize (H 2 1 1 1 1 1)%nat.
  assert (E := H ltac:(lia) ltac:(lia) ltac:(lia) ltac:(vm_compute; lia) ltac:(lia)).
  vm_compute in E. discriminate.
Qed.

(** The count m - g for the tokens 0..m-g (the paper's Alg. 4 line 27, as
    an exact count): wrong, there are m - g + 1 of them. *)
Definition gap_count_m_minus_g : Prop :=
  forall v n q m c g,
  (1 <= n)%nat -> (q <= m)%nat -> (m < v)%nat -> (c <= cmax q m n)%nat -> (1 <= g <= m)%nat ->
  length (filter (fun t => cls_is q m c t && covered m (gap_tokens m g) (tl t)) (seqs v (S n)))
  = (choose n c * (m - g) ^ c)%nat.

Theorem gap_count_m_minus_g_false : ~ gap_count_m_minus_g.
Proof.
  intros H. specialize (H 2 1 1 1 1 1)%nat.
  assert (E := H ltac:(lia) ltac:(lia) ltac:(lia) ltac:(vm_compute; lia) ltac:(lia)).
  vm_compute in E. discriminate.
Qed.

(** Lemma 20 without the absolute value (rules.md, "Subtleties the paper
    glosses" (1)): a = -1 and the row B_0 = (0, 1) of range 1 give
    (aB)_0 - (aB)_1 = 1 > a * 1 = -1. *)
Definition lemma20_no_abs : Prop :=
  forall a B h c t,
  (forall k, (k < h)%nat -> range_le (B k) c (t k)) ->
  range_le (vecmat a B h) c (sumR (fun k => a k * t k) h).

Theorem lemma20_no_abs_false : ~ lemma20_no_abs.
Proof.
  intros H.
  assert (HB : forall k, (k < 1)%nat ->
            range_le ((fun _ o => if (o =? 0)%nat then 0 else 1) k) 2 ((fun _ => 1) k)).
  { intros k _ i j Hi Hj. destruct (i =? 0)%nat, (j =? 0)%nat; lra. }
  specialize (H (fun _ => -1) (fun _ o => if (o =? 0)%nat then 0 else 1) 1%nat 2%nat
                (fun _ => 1) HB 0%nat 1%nat ltac:(lia) ltac:(lia)).
  unfold vecmat in H. simpl in H. lra.
Qed.

(** Lemma G5 (c) without m among the later positions' tokens (the deliberate break of the
    merged class size): false at v = 2, q = m = g = 1, i0 = 0, j = 1 — the class
    {(1; 1, 0), (1; 1, 1)} has 2 members, the wrong formula gives 1. *)
Definition merged_size_without_m : Prop :=
  forall v q m g i0 j, (1 <= g <= m)%nat -> (q <= m)%nat -> (m < v)%nat ->
  length (filter (member q m g (merged_kinds i0 j)) (seqs v (S (i0 + 1 + j))))
  = ((m + 1 - g) ^ (i0 + j))%nat.

Theorem merged_size_without_m_false : ~ merged_size_without_m.
Proof.
  intros H. specialize (H 2%nat 1%nat 1%nat 1%nat 0%nat 1%nat ltac:(lia) ltac:(lia) ltac:(lia)).
  rewrite G5c_size in H by lia. simpl in H. discriminate.
Qed.
