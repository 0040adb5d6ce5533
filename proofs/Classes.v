(* Classes (q, m, c) of sequences and their sizes: the counting half of
   rule cubic's theorem and of rule exact's Lemma E1 (spec/rules.md).

   Representation: a sequence is the list  t = q :: l  where q is the query
   token (the model's position k-1) and l = [t_0; ...; t_{k-2}] lists the k-1
   non-query positions in order; n = k - 1.  All sequences of the model are
   seqs v (S n) (every ordering of positions is a bijection, so the counts
   are those of {0..v-1}^k). *)
From Coq Require Import List Arith Bool Lia.
From MaxK Require Import Counting.
Import ListNotations.

(* number of non-query positions holding a token < m *)
Definition count_lt (m : nat) (l : list nat) : nat := length (filter (fun u => u <? m) l).

(* largest c of a class: k-1 if q = m, k-2 if q < m *)
Definition cmax (q m n : nat) : nat := if q =? m then n else n - 1.

(* t is in class (q, m, c): query q, max m, c non-query tokens < m *)
Definition cls_is (q m c : nat) (t : list nat) : bool :=
  (list_max t =? m) && ((hd 0 t =? q) && (count_lt (list_max t) (tl t) =? c)).

(* the non-query tokens below m all lie in G *)
Definition covered (m : nat) (G : list nat) (l : list nat) : bool :=
  forallb (fun u => (m <=? u) || existsb (Nat.eqb u) G) l.

(* ---- list_max ---- *)

Lemma list_max_ge : forall l x, In x l -> x <= list_max l.
Proof.
  intros l x Hx. assert (H := proj1 (list_max_le l (list_max l)) (le_n _)).
  rewrite Forall_forall in H. apply H; assumption.
Qed.

Lemma list_max_in : forall l, l <> [] -> In (list_max l) l.
Proof.
  induction l as [|a l IH]; intros H; [contradiction|].
  destruct l as [|b l].
  - simpl. left. lia.
  - change (list_max (a :: b :: l)) with (Nat.max a (list_max (b :: l))).
    destruct (Nat.max_spec a (list_max (b :: l))) as [[_ ->]|[_ ->]].
    + right. apply IH. discriminate.
    + left. reflexivity.
Qed.

Lemma count_lt_le : forall m l, count_lt m l <= length l.
Proof. intros; unfold count_lt; induction l; simpl; [lia|]. destruct (_ <? _); simpl; lia. Qed.

Lemma count_lt_in : forall m l, In m l -> count_lt m l < length l.
Proof.
  intros m l; unfold count_lt; induction l as [|a l IH]; simpl; intros H; [contradiction|].
  destruct H as [->|H].
  - rewrite Nat.ltb_irrefl. assert (H := count_lt_le m l). unfold count_lt in H. lia.
  - assert (H' := IH H). destruct (a <? m); simpl; lia.
Qed.

Lemma count_lt_nonm : forall m l, Forall (fun u => u <= m) l -> count_lt m l = nonm m l.
Proof.
  intros m l; unfold count_lt, nonm; induction l as [|a l IH]; simpl; intros H; [reflexivity|].
  inversion H as [|? ? Ha Hl]; subst. assert (IH' := IH Hl).
  destruct (Nat.ltb_spec a m), (Nat.eqb_spec a m); simpl; lia.
Qed.

Lemma nonm_in : forall m l, nonm m l < length l -> In m l.
Proof.
  intros m l; unfold nonm; induction l as [|a l IH]; simpl; intros H; [lia|].
  destruct (Nat.eqb_spec a m) as [->|Hne]; [left; reflexivity|].
  simpl in H. right. apply IH. lia.
Qed.

Lemma count_lt_zero : forall m l, count_lt m l = 0 -> forall u, In u l -> m <= u.
Proof.
  intros m l; unfold count_lt; induction l as [|a l IH]; simpl; intros H u Hu; [contradiction|].
  destruct (Nat.ltb_spec a m); [discriminate|]. destruct Hu as [->|Hu]; [lia|].
  apply IH; assumption.
Qed.

(* ---- the members of a class ---- *)

Lemma covered_iff : forall m G l,
  covered m G l = true <-> (forall u, In u l -> m <= u \/ In u G).
Proof.
  intros m G l; unfold covered; rewrite forallb_forall. split; intros H u Hu; specialize (H u Hu).
  - apply orb_true_iff in H. destruct H as [H|H].
    + left; apply Nat.leb_le; assumption.
    + right. apply existsb_exists in H. destruct H as [x [Hx Hux]].
      apply Nat.eqb_eq in Hux; subst; assumption.
  - apply orb_true_iff. destruct H as [H|H].
    + left; apply Nat.leb_le; assumption.
    + right. apply existsb_exists. exists u; split; [assumption | apply Nat.eqb_refl].
Qed.

(** The sequences of class (q, m, c) whose non-query tokens below m lie in G
    are exactly q :: l for l in fill m G n c; hence there are C(n,c)|G|^c.
    Hypotheses as the checker validates hints: q <= m < v, c <= cmax,
    G duplicate-free (a bitmask) and below m; n = k - 1 >= 1. *)
Theorem class_members : forall v n q m c G t,
  1 <= n -> q <= m -> m < v -> c <= cmax q m n -> (forall u, In u G -> u < m) ->
  (In t (map (cons q) (fill m G n c))
   <-> In t (seqs v (S n)) /\ cls_is q m c t && covered m G (tl t) = true).
Proof.
  intros v n q m c G t Hn Hqm Hmv Hc HG.
  assert (HmG : ~ In m G) by (intros H; specialize (HG m H); lia).
  rewrite in_map_iff. split.
  - intros [l [<- Hl]]. apply In_fill in Hl; [|assumption]. destruct Hl as [Hlen [HF Hnm]].
    rewrite Forall_forall in HF.
    assert (Hle : forall u, In u (q :: l) -> u <= m).
    { intros u [<-|Hu]; [assumption|]. destruct (HF u Hu) as [->|Hu']; [lia|].
      specialize (HG u Hu'); lia. }
    assert (Hmax : list_max (q :: l) = m).
    { apply Nat.le_antisymm.
      - apply list_max_le, Forall_forall; assumption.
      - apply list_max_ge. unfold cmax in Hc. destruct (Nat.eqb_spec q m) as [->|Hne].
        + left; reflexivity.
        + right. apply nonm_in. lia. }
    split.
    + apply In_seqs. split; [simpl; congruence|]. apply Forall_forall.
      intros u Hu. specialize (Hle u Hu). lia.
    + unfold cls_is. rewrite Hmax. simpl hd; simpl tl.
      rewrite count_lt_nonm by (apply Forall_forall; intros; apply Hle; right; assumption).
      rewrite Hnm, !Nat.eqb_refl. simpl.
      apply covered_iff. intros u Hu. destruct (HF u Hu) as [->|Hu']; [left; lia | right; assumption].
  - intros [Hs Hb]. apply andb_true_iff in Hb. destruct Hb as [Hcls Hcov].
    unfold cls_is in Hcls. apply andb_true_iff in Hcls. destruct Hcls as [Hmax Hcls].
    apply andb_true_iff in Hcls. destruct Hcls as [Hq Hcnt].
    apply Nat.eqb_eq in Hmax, Hq, Hcnt. apply In_seqs in Hs. destruct Hs as [Hlen Hv].
    destruct t as [|q' l]; [discriminate|]. simpl in Hq, Hcnt, Hlen, Hcov. subst q'.
    exists l. split; [reflexivity|]. apply In_fill; [assumption|].
    assert (Hle : Forall (fun u => u <= m) l).
    { apply Forall_forall. intros u Hu. rewrite <- Hmax. apply list_max_ge. right; assumption. }
    split; [lia|]. split.
    + apply Forall_forall. intros u Hu. rewrite Forall_forall in Hle. specialize (Hle u Hu).
      rewrite covered_iff in Hcov. destruct (Hcov u Hu); [left; lia | right; assumption].
    + rewrite <- count_lt_nonm by assumption. rewrite <- Hmax. assumption.
Qed.

Theorem class_cover_size : forall v n q m c G,
  1 <= n -> q <= m -> m < v -> c <= cmax q m n -> NoDup G -> (forall u, In u G -> u < m) ->
  length (filter (fun t => cls_is q m c t && covered m G (tl t)) (seqs v (S n)))
  = choose n c * length G ^ c.
Proof.
  intros v n q m c G Hn Hqm Hmv Hc HND HG.
  rewrite (filter_count _ _ _ (map (cons q) (fill m G n c))).
  - rewrite map_length, length_fill. reflexivity.
  - apply NoDup_seqs.
  - apply NoDup_map_cons, NoDup_fill; [assumption|]. intros H; specialize (HG m H); lia.
  - intros t. apply class_members; assumption.
Qed.

Lemma cls_is_le_max : forall q m c t, cls_is q m c t = true -> forall u, In u t -> u <= m.
Proof.
  intros q m c t H u Hu. unfold cls_is in H. apply andb_true_iff in H. destruct H as [H _].
  apply Nat.eqb_eq in H. rewrite <- H. apply list_max_ge; assumption.
Qed.

(** Lemma E1, class size: the class (q, m, c) has C(k-1, c) m^c sequences. *)
Theorem class_size : forall v n q m c,
  1 <= n -> q <= m -> m < v -> c <= cmax q m n ->
  length (filter (cls_is q m c) (seqs v (S n))) = choose n c * m ^ c.
Proof.
  intros v n q m c Hn Hqm Hmv Hc.
  rewrite <- (seq_length m 0) at 2. rewrite <- (class_cover_size v n q m c); auto.
  - f_equal. apply filter_ext_in'. intros t Ht.
    destruct (cls_is q m c t) eqn:E; [|reflexivity]. simpl. symmetry.
    apply covered_iff. intros u Hu.
    assert (u <= m) by (apply (cls_is_le_max q m c t E); destruct t; [destruct Hu|right; assumption]).
    destruct (Nat.eq_dec u m); [left; lia | right; apply in_seq; lia].
  - apply seq_NoDup.
  - intros u Hu. apply in_seq in Hu. lia.
Qed.

(** Every sequence lies in exactly one class; counting any set of sequences
    class by class (the classes of rule cubic's index ranges). *)
Theorem classes_partition : forall v n (P : list nat -> bool), 1 <= n ->
  length (filter P (seqs v (S n)))
  = list_sum (map (fun m =>
      list_sum (map (fun q =>
        list_sum (map (fun c =>
          length (filter (fun t => cls_is q m c t && P t) (seqs v (S n))))
          (seq 0 (S (cmax q m n)))))
        (seq 0 (S m))))
      (seq 0 v)).
Proof.
  intros v n P Hn.
  assert (Hshape : forall t, In t (seqs v (S n)) ->
            exists q l, t = q :: l /\ length l = n /\ Forall (fun u => u < v) t).
  { intros t Ht. apply In_seqs in Ht. destruct Ht as [Hl HF].
    destruct t as [|q l]; [discriminate|]. exists q, l. simpl in Hl. auto. }
  rewrite (count_partition _ list_max (seq 0 v)).
  2: apply seq_NoDup.
  2: { intros t Ht _. destruct (Hshape t Ht) as [q [l [-> [_ HF]]]].
       apply in_seq. split; [lia|]. simpl (0 + v).
       apply list_max_lt; [discriminate | assumption]. }
  f_equal. apply map_ext_in. intros m Hm.
  rewrite (count_partition _ (hd 0) (seq 0 (S m))).
  2: apply seq_NoDup.
  2: { intros t Ht HP. apply andb_true_iff in HP. destruct HP as [HP _]. apply Nat.eqb_eq in HP.
       destruct (Hshape t Ht) as [q [l [-> _]]]. apply in_seq. split; [lia|].
       simpl hd. rewrite <- HP. assert (q <= list_max (q :: l)) by (apply list_max_ge; left; auto).
       lia. }
  f_equal. apply map_ext_in. intros q Hq.
  rewrite (count_partition _ (fun t => count_lt (list_max t) (tl t)) (seq 0 (S (cmax q m n)))).
  2: apply seq_NoDup.
  2: { intros t Ht HP. apply andb_true_iff in HP. destruct HP as [Hq' HP].
       apply andb_true_iff in HP. destruct HP as [Hm' _].
       apply Nat.eqb_eq in Hq', Hm'. destruct (Hshape t Ht) as [q0 [l [-> [Hl _]]]].
       simpl in Hq'. subst q0. simpl tl. rewrite Hm'. apply in_seq. split; [lia|].
       unfold cmax. destruct (Nat.eqb_spec q m) as [->|Hne].
       - assert (H := count_lt_le m l). lia.
       - assert (Hin : In m l).
         { assert (H := list_max_in (q :: l) ltac:(discriminate)). rewrite Hm' in H.
           destruct H as [H|H]; [congruence | assumption]. }
         assert (H := count_lt_in m l Hin). lia. }
  f_equal. apply map_ext_in. intros c Hc. f_equal. apply filter_ext_in'. intros t _.
  unfold cls_is. destruct (list_max t =? m), (hd 0 t =? q),
    (count_lt (list_max t) (tl t) =? c), (P t); reflexivity.
Qed.

Lemma filter_all_true : forall (A : Type) (l : list A), filter (fun _ => true) l = l.
Proof. intros A l; induction l; simpl; congruence. Qed.

(** Lemma E1, total: the class sizes add up to v^k. *)
Theorem classes_total : forall v n, 1 <= n ->
  list_sum (map (fun m =>
    list_sum (map (fun q =>
      list_sum (map (fun c => choose n c * m ^ c) (seq 0 (S (cmax q m n)))))
      (seq 0 (S m))))
    (seq 0 v))
  = v ^ (S n).
Proof.
  intros v n Hn. rewrite <- length_seqs.
  rewrite <- (filter_all_true _ (seqs v (S n))).
  - rewrite (classes_partition v n (fun _ => true) Hn).
    f_equal. apply map_ext_in. intros m Hm. apply in_seq in Hm.
    f_equal. apply map_ext_in. intros q Hq. apply in_seq in Hq.
    f_equal. apply map_ext_in. intros c Hc. apply in_seq in Hc.
    rewrite <- class_size with (v := v) (q := q); try lia.
    f_equal. apply filter_ext_in'. intros; symmetry; apply andb_true_r.
Qed.
