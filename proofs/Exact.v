(* Rule exact (spec/rules.md section "Rule exact", checker/rules/exact.py):
   Lemma E1 (cover and residue partition all v^k sequences, with the counts),
   Lemma E2 (the integer bound, both sign cases) and its integer arithmetic,
   and the theorem's addition of the two counts.  Only the standard library. *)
From Coq Require Import Reals Lra Lia List Bool Arith ZArith.
From MaxK Require Import Sums Softmax Counting Classes Cubic.
Import ListNotations.
Open Scope R_scope.

(* ------------------------------------------------------------------------ *)
(* Lemma E1                                                                  *)

Definition residue_pred good z (t : list nat) : bool := negb (cover_pred good z t).

(** Cover and residue are disjoint ... *)
Theorem E1_disjoint : forall good z t,
  cover_pred good z t && residue_pred good z t = false.
Proof. intros; unfold residue_pred; destruct (cover_pred good z t); reflexivity. Qed.

(** ... and together they are all v^k sequences. *)
Theorem E1_total : forall v n good z,
  (length (filter (cover_pred good z) (seqs v (S n)))
   + length (filter (residue_pred good z) (seqs v (S n))) = v ^ S n)%nat.
Proof.
  intros. transitivity (length (filter (fun _ => true) (seqs v (S n)))).
  - rewrite (length_filter_split _ (fun _ => true) (cover_pred good z) (seqs v (S n))).
    reflexivity.
  - rewrite filter_all_true, length_seqs. reflexivity.
Qed.

(** The class (q, m, c) has C(k-1, c) m^c sequences (1 for c = 0), and the
    class sizes add up to v^k (Classes.class_size, Classes.classes_total). *)
Definition E1_class_size := class_size.
Definition E1_classes_total := classes_total.

(** Per class: the cover part is C(k-1,c) |G|^c (resp. z), the residue part
    C(k-1,c)(m^c - |G|^c) (resp. 1 - z): what Plan computes. *)
Theorem E1_class_residue : forall v n good z q m c,
  (1 <= n)%nat -> (q <= m)%nat -> (m < v)%nat -> (c <= cmax q m n)%nat ->
  NoDup (good q m c) -> (forall u, In u (good q m c) -> (u < m)%nat) ->
  length (filter (fun t => cls_is q m c t && residue_pred good z t) (seqs v (S n)))
  = (if (c =? 0)%nat then (if z q m then 0 else 1)
     else choose n c * m ^ c - choose n c * length (good q m c) ^ c)%nat.
Proof.
  intros v n good z q m c Hn Hqm Hmv Hc HND HG.
  assert (Hsplit := length_filter_split _ (cls_is q m c) (cover_pred good z) (seqs v (S n))).
  rewrite class_size in Hsplit by assumption. unfold residue_pred.
  assert (Hkey : forall t, cls_is q m c t = true -> cover_pred good z t
                 = (if (c =? 0)%nat then z q m else covered m (good q m c) (tl t))).
  { intros t E. destruct (cls_is_keys q m c t E) as [H1 [H2 H3]]. unfold cover_pred.
    rewrite H1, H2, H3. reflexivity. }
  rewrite (filter_ext_in' _ (fun t => cls_is q m c t && cover_pred good z t)
             (fun t => cls_is q m c t &&
                (if (c =? 0)%nat then z q m else covered m (good q m c) (tl t)))) in Hsplit.
  2: { intros t _. destruct (cls_is q m c t) eqn:E; [|reflexivity]. simpl. apply Hkey; auto. }
  destruct (Nat.eqb_spec c 0) as [->|Hc0].
  - rewrite choose_0, Nat.pow_0_r in Hsplit. simpl Nat.eqb. destruct (z q m).
    + rewrite (filter_ext_in' _ (fun t => cls_is q m 0 t && true) (cls_is q m 0)) in Hsplit
        by (intros; apply andb_true_r).
      rewrite class_size in Hsplit by assumption. rewrite choose_0, Nat.pow_0_r in Hsplit. lia.
    + rewrite (filter_ext_in' _ (fun t => cls_is q m 0 t && false) (fun _ => false)) in Hsplit
        by (intros; apply andb_false_r).
      assert (H0 : forall L : list (list nat), filter (fun _ => false) L = []) by
        (induction L; simpl; auto).
      rewrite H0 in Hsplit. change (length (@nil (list nat))) with 0%nat in Hsplit. lia.
  - rewrite class_cover_size in Hsplit by assumption. lia.
Qed.

(* ------------------------------------------------------------------------ *)
(* Lemma E2                                                                  *)

(* the checker's term_i(o): upper weight for a non-negative bound, lower weight for a negative one *)
Definition term (wlo whi xb : R) : R := if Rle_dec 0 xb then whi * xb else wlo * xb.

Lemma E2_term : forall w wlo whi x xb,
  0 <= wlo -> wlo <= w <= whi -> x <= xb -> w * x <= term wlo whi xb.
Proof.
  intros w wlo whi x xb H0 [H1 H2] Hx. unfold term.
  assert (w * x <= w * xb) by (apply Rmult_le_compat_l; lra).
  destruct (Rle_dec 0 xb) as [Hxb|Hxb].
  - assert (w * xb <= whi * xb) by (apply Rmult_le_compat_r; lra). lra.
  - assert (w * xb <= wlo * xb) by nra. lra.
Qed.

(** Lemma E2: if T(o) = sum_i term_i(o) < 0 then sum_i w_i x_i(o) < 0. *)
Theorem E2 : forall (k : nat) (w wlo whi x xb : nat -> R),
  (forall i, (i < k)%nat -> 0 <= wlo i /\ wlo i <= w i <= whi i) ->
  (forall i, (i < k)%nat -> x i <= xb i) ->
  sumR (fun i => term (wlo i) (whi i) (xb i)) k < 0 ->
  sumR (fun i => w i * x i) k < 0.
Proof.
  intros k w wlo whi x xb Hw Hx HT.
  apply Rle_lt_trans with (sumR (fun i => term (wlo i) (whi i) (xb i)) k); [|assumption].
  apply sumR_le. intros i Hi. destruct (Hw i Hi) as [H0 H1].
  apply E2_term; auto.
Qed.

(** The bounds E2 needs, from the recorded enclosures: x_bar from the six
    endpoints, and w^- <= w <= w^+ from the endpoints of EXP_EQKE and EXP_EQKP
    with non-negative lower ends (the rule refuses otherwise). *)
Lemma E2_xbar : forall euo eum ev_o ev_m pv_o pv_m
                       euo_hi eum_lo ev_o_hi ev_m_lo pv_o_hi pv_m_lo,
  euo <= euo_hi -> eum_lo <= eum -> ev_o <= ev_o_hi -> ev_m_lo <= ev_m ->
  pv_o <= pv_o_hi -> pv_m_lo <= pv_m ->
  (euo - eum) + (ev_o - ev_m) + (pv_o - pv_m)
  <= (euo_hi - eum_lo) + (ev_o_hi - ev_m_lo) + (pv_o_hi - pv_m_lo).
Proof. intros; lra. Qed.

Lemma E2_weights : forall e b elo ehi blo bhi,
  0 <= elo -> elo <= e <= ehi -> 0 <= blo -> blo <= b <= bhi ->
  0 <= elo * blo /\ elo * blo <= e * b <= ehi * bhi.
Proof.
  intros e b elo ehi blo bhi He [He1 He2] Hb [Hb1 Hb2].
  split; [apply Rmult_le_pos; assumption|]. split.
  - apply Rmult_le_compat; assumption.
  - apply Rmult_le_compat; lra.
Qed.

(** The integer arithmetic of the checker: x_bar = X * px and the weights
    W * pw with integers X, W and positive powers of two px, pw.  The
    checker's integer term (W^+ X if X >= 0 else W^- X) is the real term
    divided by px * pw, and a sum of such terms is negative iff the
    integer sum is. *)
Lemma E2_integer_term : forall (Wlo Whi Xi : Z) px pw, 0 < px -> 0 < pw ->
  term (IZR Wlo * pw) (IZR Whi * pw) (IZR Xi * px)
  = IZR (if Z.leb 0 Xi then Whi * Xi else Wlo * Xi)%Z * (px * pw).
Proof.
  intros Wlo Whi Xi px pw Hpx Hpw. unfold term.
  destruct (Rle_dec 0 (IZR Xi * px)) as [H|H]; destruct (Z.leb_spec 0 Xi) as [Hz|Hz].
  - rewrite mult_IZR; ring.
  - exfalso. apply IZR_lt in Hz. simpl in Hz. nra.
  - exfalso. apply IZR_le in Hz. simpl in Hz. apply H. nra.
  - rewrite mult_IZR; ring.
Qed.

Fixpoint sumZ (f : nat -> Z) (n : nat) : Z :=
  match n with O => 0%Z | S n' => (sumZ f n' + f n')%Z end.

Lemma E2_integer_sum : forall (f : nat -> Z) k p, 0 < p ->
  (sumR (fun i => IZR (f i) * p) k < 0 <-> (sumZ f k < 0)%Z).
Proof.
  intros f k p Hp.
  assert (E : sumR (fun i => IZR (f i) * p) k = IZR (sumZ f k) * p).
  { induction k; simpl; [ring|]. rewrite IHk, plus_IZR. ring. }
  rewrite E. split; intro H.
  - apply lt_IZR. simpl. nra.
  - apply IZR_lt in H. simpl in H. nra.
Qed.

(** Theorem (exact), the addition of the counts: the cover and the
    certified residue sequences are disjoint, so a list of the cover followed
    by any duplicate-free list of residue sequences has no duplicates. *)
Theorem exact_counts_add : forall v n good z (Rcert : list (list nat)),
  NoDup Rcert -> (forall t, In t Rcert -> residue_pred good z t = true) ->
  NoDup (filter (cover_pred good z) (seqs v (S n)) ++ Rcert).
Proof.
  intros v n good z R HR Hres. apply NoDup_app'.
  - apply NoDup_filter, NoDup_seqs.
  - assumption.
  - intros t Ht Ht'. apply filter_In in Ht. destruct Ht as [_ Hc].
    specialize (Hres t Ht'). unfold residue_pred in Hres. rewrite Hc in Hres. discriminate.
Qed.
